"""CUDA preprocessing into the engine's input binding, and the choice of device (`preprocess.device`).

`CudaPreprocessor` has the CPU preprocessor's interface (`preprocess(image) -> geometry`, writes
the backend's input): the frame is copied once into pinned host memory (on Jetson mapped into the
GPU's address space, so the kernel reads it in place; on a discrete GPU uploaded once on the stream),
the fused kernel (plugins_cuda) writes the tensor straight into the TensorRT input binding, and
enqueueV3 follows on the same stream. An INT8 engine whose input is float32 takes the same tensor as
FP32; only an engine with an INT8 input gets the kernel's quantising output (its input scale).
With `SDK_CUDA_EMULATION=host` the same code runs on the emulated device (sdk/gpu/emulation.py).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np

from sdk.errors import BackendError, ConfigError
from sdk.gpu.session import CudaSession, DeviceChoice
from sdk.preprocess.geometry import ResizeGeometry
from sdk.spec.schema import Preprocess
from sdk.stage import Stage

NO_DEVICE = "no CUDA device"
CUDA_HINT = "set preprocess.device: auto (the CPU where the CUDA path cannot run) or cpu; SDK_CUDA_EMULATION=host emulates the CUDA path on the host"


def cuda_problem(backend, kernels_dir: Path | None) -> tuple[str, str] | None:
    """(reason, detail) why the real CUDA path cannot run here, or None when it can."""
    from sdk.engine.cuda_check import require_cuda_device

    try:
        require_cuda_device(BackendError)
    except BackendError as exc:
        return NO_DEVICE, exc.message.split(": TensorRT")[0]
    if importlib.util.find_spec("cuda") is None or importlib.util.find_spec("cuda.bindings") is None:
        return "cuda-python is not installed", "the kernels are loaded with cuda.bindings.driver (perception-deploy-sdk[cuda12] or [cuda13])"
    if kernels_dir is None or not Path(kernels_dir).is_dir():
        return "the release carries no CUDA kernels", f"no folder {kernels_dir}"
    if getattr(backend, "name", "") != "tensorrt":
        return "the engine is not on the GPU", f"the backend is {backend.describe()}: its input is host memory"
    return None


def choose_device(requested: str, backend, kernels_dir: Path | None, where: str = "preprocess.device") -> DeviceChoice:
    """`cpu`; `cuda` (an error where it cannot run, emulated under SDK_CUDA_EMULATION=host); `auto`:
    cuda where it can run, else cpu with the reason. auto never emulates."""
    from sdk.gpu.emulation import ENV, emulation_requested

    if requested == "cpu":
        return DeviceChoice("cpu", "preprocess.device is cpu")
    emulate = emulation_requested()
    if requested == "cuda" and emulate:
        return DeviceChoice("cuda", f"preprocess.device is cuda and {ENV}=host: the CUDA path on the emulated device", emulated=True)
    problem = cuda_problem(backend, kernels_dir)
    if problem is None:
        return DeviceChoice(
            "cuda", "a CUDA device, cuda-python and the kernels are available" if requested == "auto" else "preprocess.device is cuda"
        )
    reason, detail = problem
    if requested == "cuda":
        raise BackendError(f"{where}: cuda, but {reason} ({detail}); allowed on this machine: auto or cpu", hint=CUDA_HINT)
    if requested != "auto":
        raise ConfigError(f"{where}: {requested!r}; allowed: auto, cpu, cuda")
    return DeviceChoice("cpu", reason, detail=detail + (f"; auto never emulates ({ENV} applies to device: cuda)" if emulate else ""))


class CudaPreprocessor(Stage):
    name = "preprocess"

    def __init__(
        self,
        spec: Preprocess,
        backend,
        choice: DeviceChoice,
        *,
        image_input: str | None = None,
        kernels_dir: Path | None = None,
        int8_scale: float | None = None,
        memory: str | None = None,
        cuda_graph: bool = False,
    ) -> None:
        if image_input is None and len(backend.inputs) != 1:
            raise BackendError(f"the CUDA preprocessing feeds one input; the engine has {len(backend.inputs)}")
        input_name = image_input if image_input is not None else next(iter(backend.inputs))
        binding = backend.inputs[input_name]
        quantised = binding.dtype == np.int8
        if quantised and (int8_scale is None or spec.dtype != "float32"):
            raise ConfigError(
                f"the engine's input {input_name!r} is INT8: the kernel quantises float32 preprocessing with the input's scale",
                hint="keep preprocess.dtype float32 and build the engine with a float32 input (INT8 engines take the same input as FP32)",
            )
        expected = np.dtype(np.int8) if quantised else np.dtype(spec.dtype)
        if tuple(binding.shape) != spec.tensor_shape or binding.dtype != expected:
            raise ConfigError(
                f"preprocess produces {list(spec.tensor_shape)} {expected} but the model input is {list(binding.shape)} {binding.dtype}",
                hint="make preprocess.resize, layout and dtype match the model's input tensor",
            )
        self.spec, self.input_name, self._binding_bytes = spec, input_name, binding.nbytes
        self._int8_scale = int8_scale if quantised else None
        self.session = CudaSession(choice, backend, kernels_dir, memory, cuda_graph=cuda_graph)
        try:
            self._dst = self.session.binding(input_name)
        except BaseException:
            self.session.close()
            raise
        self.plan = None
        self._frame = self._image = None
        self._source = 0
        self._params = self._function = None
        self._color = None

    def describe(self) -> str:
        return f"CUDA, fused kernel into the engine's input binding; {self.session.gpu.describe()}"

    def report(self) -> dict:
        return {**self.session.report(), "kernel": self.plan.kernel if self.plan is not None else None, "how": self.describe()}

    def _prepare(self, width: int, height: int) -> None:
        from sdk.gpu.plan import PreprocessPlan

        plan = PreprocessPlan.build(self.spec, "bgr8", width, height, int8_scale=self._int8_scale)
        if plan.output_bytes != self._binding_bytes:
            raise BackendError(f"the kernel writes {plan.output_bytes} bytes but the input binding holds {self._binding_bytes}")
        gpu = self.session.gpu
        mapped = gpu.memory == "mapped"
        self._frame, source = gpu.pinned_buffer(plan.source_bytes, mapped)
        self._image = self._frame.reshape(height, width, 3)  # rows tightly packed: pitch = 3 x width
        self._source = source if mapped else gpu.device_buffer(plan.source_bytes)
        self._params = plan.bound(self._source, self._dst)
        self._function = gpu.function(plan.kernel)
        self.plan = plan
        self._warm = False  # the first frame of a size runs un-captured (TensorRT: enqueueV3 once before capturing)
        if self.session.graph is not None:
            self.session.graph.invalidate()

    def _enqueue(self) -> None:
        """This stage's work on the stream: the frame's upload (discrete GPU), the kernel, its events."""
        gpu, times, plan = self.session.gpu, self.session.times, self.plan
        times.mark("preprocess_start")
        if gpu.memory == "copy":
            gpu.upload(self._source, self._frame)
        gpu.enqueue(self._function, plan.grid, plan.block, self._params)
        times.mark("preprocess_end")

    def _enqueue_frame(self) -> bool:
        """The whole frame's work (preprocess, the engine, the decode), for the capture."""
        session = self.session
        self._enqueue()
        if not session.engine_enqueue():
            return False
        if session.decode_enqueue is not None:
            session.decode_enqueue()
        return True

    def _launch_graph(self) -> bool:
        """Replay the captured frame (capturing it first where needed); False where this frame runs un-captured."""
        graph = self.session.graph
        if graph is None or graph.refused or not self._warm:
            self._warm = True
            return False
        if not graph.ready and not graph.capture(self._enqueue_frame):
            return False
        graph.launch()
        self.session.launched = True
        return True

    def __call__(self, image: np.ndarray) -> ResizeGeometry:
        if image.ndim == 2:
            import cv2

            image = cv2.cvtColor(image, cv2.COLOR_GRAY2BGR)
        height, width = image.shape[:2]
        plan = self.plan
        if plan is None or plan.geometry.source_width != width or plan.geometry.source_height != height:
            self._prepare(width, height)
            plan = self.plan
        np.copyto(self._image, image)  # the one host copy: into the pinned frame buffer the GPU reads
        if self._launch_graph():
            return plan.geometry  # the frame's work runs as the graph; its stage times are read after it ends
        self._enqueue()
        self.session.times.add("preprocess", "preprocess_start", "preprocess_end")  # waits for the end event: the stage's latency is its own
        return plan.geometry

    def close(self) -> None:
        self.session.close()
