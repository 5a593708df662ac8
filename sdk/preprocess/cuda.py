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
from sdk.geometry import ResizeGeometry
from sdk.gpu.session import CudaSession, DeviceChoice
from sdk.pixels import BT601_LIMITED, Nv12Image, YuvColour
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
    if not getattr(backend, "device_bindings", False):
        return "the engine is not on the GPU", f"the backend is {backend.describe()}: its input is host memory"
    return None


def choose_device(requested: str, backend, kernels_dir: Path | None, where: str = "preprocess.device") -> DeviceChoice:
    """`cpu`; `cuda` (an error where it cannot run, emulated under SDK_CUDA_EMULATION=host); `auto`:
    cuda where it can run, else cpu with the reason. auto never emulates."""
    from sdk.gpu.emulation_switch import ENV, emulation_requested

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
        session: CudaSession | None = None,
        slot: int = 0,
        batch: int = 1,
    ) -> None:
        """`session`: several cameras share the pipeline's one session (one stream, one engine), each writing
        batch slot `slot` of `batch` (decision 0460); None: this stage opens and owns its own (one camera)."""
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
        shape = (batch, *spec.tensor_shape[1:])
        if tuple(binding.shape) != shape or binding.dtype != expected:
            raise ConfigError(
                f"preprocess produces {list(shape)} {expected} but the model input is {list(binding.shape)} {binding.dtype}",
                hint="make preprocess.resize, layout and dtype match the model's input tensor",
            )
        if not 0 <= slot < batch:
            raise BackendError(f"batch slot {slot} is outside the input's batch of {batch}")
        self.spec, self.input_name, self._binding_bytes = spec, input_name, binding.nbytes // batch  # one image's bytes
        self._int8_scale = int8_scale if quantised else None
        self._owns_session = session is None
        self.session = CudaSession(choice, backend, kernels_dir, memory, cuda_graph=cuda_graph) if session is None else session
        try:
            self._dst = self.session.binding(input_name) + slot * self._binding_bytes  # slot i of the batched binding
        except BaseException:
            if self._owns_session:
                self.session.close()
            raise
        self.slot = slot
        self.session.register("preprocess", self._enqueue)  # its part of the frame, which the frame's graph captures
        self.plan = None
        self._key = None
        self._frame = self._image = self._planes = None
        self._source = 0
        self._params = self._function = None

    def describe(self) -> str:
        return f"CUDA, fused kernel into the engine's input binding; {self.session.gpu.describe()}"

    def report(self) -> dict:
        plan = self.plan
        return {
            **self.session.report(),
            "kernel": plan.kernel if plan is not None else None,
            "source_format": plan.source_format if plan is not None else None,
            "how": self.describe(),
        }

    def _prepare(self, source_format: str, width: int, height: int, colour: YuvColour, pitches: tuple[int, int] | None) -> None:
        """Buffers and the parameter block for frames of one format and size. `pitches`: the (Y, UV) pitches
        of NV12 frames the GPU reads in place (no frame buffer of ours), else None."""
        from sdk.gpu.plan import PreprocessPlan

        pitch, uv_pitch = pitches if pitches is not None else (None, None)
        plan = PreprocessPlan.build(
            self.spec, source_format, width, height, int8_scale=self._int8_scale, colour=colour, pitch=pitch, uv_pitch=uv_pitch
        )
        if plan.output_bytes != self._binding_bytes:
            raise BackendError(f"the kernel writes {plan.output_bytes} bytes but the input binding holds {self._binding_bytes}")
        gpu = self.session.gpu
        self._function = gpu.function(plan.kernel)
        self.plan, self._key = plan, (source_format, width, height, colour, pitches)
        self._warm = False  # the first frame of a format and size runs un-captured (TensorRT: enqueueV3 once before capturing)
        if self.session.graph is not None:
            self.session.graph.invalidate()
        if pitches is not None:  # the source's own device memory: addresses bound per frame
            self._frame = self._image = self._planes = None
            self._params = None
            return
        mapped = gpu.memory == "mapped"
        total = plan.source_bytes + plan.uv_bytes  # NV12: Y rows, then UV rows, in one buffer (1.5 bytes a pixel)
        self._frame, source = gpu.pinned_buffer(total, mapped)
        self._source = source if mapped else gpu.device_buffer(total)
        if source_format == "nv12":
            y = self._frame[: plan.source_bytes].reshape(height, width)
            uv = self._frame[plan.source_bytes :].reshape((height + 1) // 2, (width + 1) // 2, 2)
            self._image, self._planes = None, (y, uv)
            self._params = plan.bound(self._source, self._dst, self._source + plan.source_bytes)
        else:
            self._image, self._planes = self._frame.reshape(height, width, 3), None  # rows tightly packed: pitch = 3 x width
            self._params = plan.bound(self._source, self._dst)

    def _enqueue(self, params=None, *, upload: bool = True) -> None:
        """This stage's work on the stream: the frame's upload (discrete GPU), the kernel, its events."""
        gpu, times, plan = self.session.gpu, self.session.times, self.plan
        times.mark("preprocess_start")
        if gpu.memory == "copy" and upload:
            gpu.upload(self._source, self._frame)
        gpu.enqueue(self._function, plan.grid, plan.block, self._params if params is None else params)
        times.mark("preprocess_end")

    def _launch_graph(self) -> bool:
        """Replay the captured frame (capturing it first where needed); False where this frame runs un-captured.
        Frames read in place from the source's device memory never run as the graph: their addresses change."""
        graph = self.session.graph
        if graph is None or graph.refused or not self._warm:
            self._warm = True
            return False
        if not graph.ready and not graph.capture(self.session.enqueue_frame):
            return False
        self.session.launch_graph()
        return True

    def __call__(self, image) -> ResizeGeometry:
        """Preprocess one frame into the binding: BGR (or gray) arrays, or NV12 frames (sdk.pixels.Nv12Image),
        which the NV12 kernel reads directly: from the source's device memory where it gives one
        (`Nv12Image.device`), else from our pinned buffer after one host copy of 1.5 bytes a pixel."""
        nv12 = isinstance(image, Nv12Image)
        if not nv12 and image.ndim == 2:
            import cv2

            image = cv2.cvtColor(image, cv2.COLOR_GRAY2BGR)
        height, width = image.shape[:2]
        if nv12:
            resident = image.device is not None
            key = ("nv12", width, height, image.colour, (image.pitch, image.uv_pitch) if resident else None)
        else:
            resident, key = False, ("bgr8", width, height, BT601_LIMITED, None)
        if self.plan is None or self._key != key:
            self._prepare(*key)
        plan, times = self.plan, self.session.times
        if resident:
            params = plan.bound(image.device[0], self._dst, image.device[1])
        else:
            params = self._params
            if nv12:  # the one host copy: both planes into the pinned frame buffer the GPU reads
                np.copyto(self._planes[0], image.y)
                np.copyto(self._planes[1], image.uv)
            else:
                np.copyto(self._image, image)
        if not resident and self._launch_graph():
            return plan.geometry  # the frame's work runs as the graph; its stage times are read after it ends
        self._enqueue(params, upload=not resident)
        times.add("preprocess")  # waits for the end event: the stage's latency is its own
        return plan.geometry

    def close(self) -> None:
        if self._owns_session:  # a shared session is closed by whoever opened it (sdk.preprocess.stage.Preprocessing)
            self.session.close()
