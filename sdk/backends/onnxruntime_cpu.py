"""ONNX Runtime on CPU: the embedded default backend."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from sdk.backends.base import Backend, TensorSpec
from sdk.errors import ModelError, missing_dependency

_ONNX_TO_NUMPY = {
    "tensor(float)": np.float32,
    "tensor(float16)": np.float16,
    "tensor(double)": np.float64,
    "tensor(uint8)": np.uint8,
    "tensor(int8)": np.int8,
    "tensor(int32)": np.int32,
    "tensor(int64)": np.int64,
    "tensor(bool)": np.bool_,
}


# On x86-64 without VNNI (SSE4.1, AVX2, AVX-512 without VNNI), ONNX Runtime's default INT8 kernels
# multiply u8 x s8 with VPMADDUBSW, whose 16-bit pair sums saturate; its documented switch takes the
# exact u8 x u8 path instead (x86 only; Arm is unaffected). Measured on the example detector (AVX2 EPYC):
# box-output cosine to FP32 0.978 without it, 0.9965 with it, equal to exact Q/DQ arithmetic and to what
# TensorRT's int32 accumulation computes; ~12 % slower there (37.9 against 33.4 ms a frame side by side).
PRECISE_INT8 = {"session.x64quantprecision": "1"}


def session_options(threads: int | None = None, *, spinning: bool = True):
    """The options every ONNX Runtime CPU session of the SDK uses: full graph optimization, the
    given intra-op threads, one inter-op thread, and exact INT8 arithmetic on every x86 CPU.
    `spinning=False`: idle intra-op threads sleep instead of spinning, for work on the host (the FP32
    reference, the accuracy gate, the sensitivity search) that shares its cores with everything else.
    Scheduling only: the same kernels and work split, so the outputs are bit-identical. The device's
    runtime does as the pipeline's `model.spinning` says (default: ONNX Runtime's own, spinning)."""
    try:
        import onnxruntime as ort
    except ImportError:
        raise missing_dependency("onnxruntime", "pip install onnxruntime") from None
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if threads:
        options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    for key, value in PRECISE_INT8.items():
        options.add_session_config_entry(key, value)
    if not spinning:
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return options


class OnnxRuntimeBackend(Backend):
    name = "onnxruntime"

    def __init__(self, model_path: Path, *, threads: int | None = None, batch: int = 1, spinning: bool = True) -> None:
        super().__init__()
        self.spinning = spinning  # see session_options
        self.batch = batch  # a dynamic first dimension is bound to this many frames
        self.model_path = Path(model_path)
        self.threads = threads
        self._session = None
        self._binding = None
        self._inputs: tuple[TensorSpec, ...] = ()
        self._outputs: tuple[TensorSpec, ...] = ()

    def open(self) -> None:
        try:
            import onnxruntime as ort
        except ImportError:
            raise missing_dependency("onnxruntime", "pip install onnxruntime") from None
        try:
            options = session_options(self.threads, spinning=self.spinning)
            session = ort.InferenceSession(str(self.model_path), options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # ORT raises its own exception types per failure
            raise ModelError(f"ONNX Runtime cannot load {self.model_path}: {exc}") from None
        self._inputs = tuple(_spec(t, self.model_path, self.batch) for t in session.get_inputs())
        self._outputs = tuple(_spec(t, self.model_path, self.batch) for t in session.get_outputs())
        binding = session.io_binding()
        # Buffers bound once: ORT reads inputs from and writes outputs into these numpy arrays.
        for spec in self._inputs:
            array = np.zeros(spec.shape, spec.dtype)
            self.inputs[spec.name] = array
            binding.bind_ortvalue_input(spec.name, ort.OrtValue.ortvalue_from_numpy(array))
        for spec in self._outputs:
            array = np.zeros(spec.shape, spec.dtype)
            self.outputs[spec.name] = array
            binding.bind_ortvalue_output(spec.name, ort.OrtValue.ortvalue_from_numpy(array))
        self._session, self._binding = session, binding

    def infer(self) -> None:
        self._session.run_with_iobinding(self._binding)

    def close(self) -> None:
        self._binding = None
        self._session = None

    @property
    def input_specs(self) -> tuple[TensorSpec, ...]:
        return self._inputs

    @property
    def output_specs(self) -> tuple[TensorSpec, ...]:
        return self._outputs

    def describe(self) -> str:
        import onnxruntime as ort

        return f"onnxruntime {ort.__version__} CPU, {self.threads or 'default'} thread(s)"


class OnnxRuntimeBatches:
    """A model run on batches of any size (a cascade step: the crops of one frame), where the engine of the first model
    is bound once to fixed shapes. `inputs` and `outputs`: (name, shape) with the model's own dimensions (a free batch
    is a string); `run(fetch, feed)` runs one batch and returns the fetched outputs (None: all of them)."""

    name = "onnxruntime"

    def __init__(self, model_path: Path, *, threads: int | None = None, where: str = "") -> None:
        self.model_path = Path(model_path)
        self.threads = threads
        self.where = where or str(model_path)
        self._session = None
        self.inputs: list[tuple[str, list]] = []
        self.outputs: list[tuple[str, list]] = []

    def open(self) -> OnnxRuntimeBatches:
        try:
            import onnxruntime as ort
        except ImportError:
            raise missing_dependency("onnxruntime", "pip install onnxruntime") from None
        try:
            self._session = ort.InferenceSession(str(self.model_path), session_options(self.threads), providers=["CPUExecutionProvider"])
        except Exception as exc:  # ORT raises its own types
            raise ModelError(f"{self.where}: ONNX Runtime cannot load {self.model_path}: {exc}") from None
        self.inputs = [(t.name, list(t.shape)) for t in self._session.get_inputs()]
        self.outputs = [(t.name, list(t.shape)) for t in self._session.get_outputs()]
        return self

    def run(self, fetch: list[str] | None, feed: dict[str, np.ndarray]) -> list[np.ndarray]:
        return self._session.run(fetch, feed)

    def close(self) -> None:
        self._session = None


def _spec(arg, model_path: Path, batch: int = 1) -> TensorSpec:
    shape = tuple(arg.shape)
    if shape and not (isinstance(shape[0], int) and shape[0] > 0):
        shape = (batch, *shape[1:])  # a dynamic batch dimension: bound once, to the frames per call
    if not all(isinstance(d, int) and d > 0 for d in shape):
        raise ModelError(
            f"{model_path}: tensor {arg.name!r} has a dynamic shape {list(shape)}",
            hint="give model.prepare.inputs a static shape; the runtime binds its buffers once",
        )
    if arg.type not in _ONNX_TO_NUMPY:
        raise ModelError(f"{model_path}: tensor {arg.name!r} has unsupported type {arg.type}")
    return TensorSpec(arg.name, shape, np.dtype(_ONNX_TO_NUMPY[arg.type]))
