"""TensorRT on the device's GPU or a DLA core: an engine built for this device, buffers bound once.

open(): CUDA driver and device checked first (deserializing without one crashes the process), the
plan header checked against the installed TensorRT (a mismatch is named, not a crash), the engine's
dynamic input shapes set for the pipeline's batch (sdk/backends/tensorrt_shapes.py decides them), its
IO checked against the tensors the pipeline declares, then every buffer allocated once: device memory
bound to the execution context with set_tensor_address, pinned host memory behind the numpy arrays
callers fill and read. infer(): copy in, execute_async_v3 on the backend's CUDA stream, copy out,
synchronise; CUDA events around the execution give `last_infer_ms` (the GPU/DLA time alone).
With `cuda_graph`, open() captures the engine's launches once into a CUDA graph and infer() replays
it with one launch (less CPU time per frame and less jitter from kernel-launch overhead); an
engine TensorRT cannot capture is an error at open, never a silent fallback.

CUDA is driven through the driver API only (`cuda.bindings.driver`, DRIVER_NAMES), on the device's primary
context, which TensorRT's own runtime shares. The runtime-API module (`cuda.bindings.runtime`) refuses to run on a
driver older than the CUDA it was built for (cudaErrorInsufficientDriver, 35): cuda-bindings 12.x starts at 12.8,
newer than JetPack 6's CUDA 12.2 / 12.6, while the driver module resolves each entry point from the installed driver
(cuGetProcAddress) and so runs on any driver of its major (decision 0412).
tensorrt and cuda-python are imported here only, when opened.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np

from sdk.backends.base import Backend, TensorSpec
from sdk.backends.tensorrt_shapes import EngineTensor, input_shapes, resolved
from sdk.engine.cuda_check import require_cuda_device
from sdk.engine.plan_header import read_plan_header
from sdk.engine.platforms import TensorRTVersion
from sdk.errors import BackendError, ConfigError, ModelError, missing_dependency
from sdk.gpu.driver_calls import BASE_DRIVER_NAMES, DriverCalls
from sdk.gpu.handles import device_address, native_handle

# Every cuda.bindings.driver name this backend calls; a test checks them against the installed package and that
# every name passed to _call and _own is declared here.
DRIVER_NAMES = BASE_DRIVER_NAMES + (
    "cuEventCreate",
    "CUevent_flags",
    "cuEventRecord",
    "cuEventElapsedTime",
    "cuEventDestroy",
    "cuMemcpyHtoD",
    "cuStreamBeginCapture",
    "CUstreamCaptureMode",
    "cuStreamEndCapture",
    "cuGraphInstantiate",
    "cuGraphLaunch",
    "cuGraphExecDestroy",
    "cuGraphDestroy",
)
INSTALL_HINT = "pip install 'cuda-bindings>=12,<13' on a CUDA 12 driver (JetPack 6), 'cuda-bindings>=13,<14' on CUDA 13"


class TensorRTBackend(DriverCalls, Backend):
    name = "tensorrt"
    device_bindings = True

    def __init__(
        self,
        engine_path: Path,
        *,
        declared: tuple[TensorSpec, ...] = (),
        dla_core: int | None = None,
        profile_layers: bool = False,
        cuda_graph: bool = False,
        batch: int = 1,
    ) -> None:
        super().__init__()
        self.engine_path = Path(engine_path)
        self.profile_layers = profile_layers  # TensorRT's per-layer profiler: names the bottleneck layers, costs time
        self.layer_ms: dict[str, float] = {}  # summed over every infer() since open
        self.declared = declared  # the tensors the pipeline expects (name, shape, dtype); empty: take the engine's
        self.dla_core = dla_core
        self.batch = batch  # the frames per call a dynamic first (batch) dimension is set to
        if cuda_graph and profile_layers:
            raise ConfigError(
                "model.cuda_graph and model.profile_layers exclude each other: TensorRT's layer profiler needs an un-captured launch",
                hint="profile without the graph, then run with it",
            )
        self.cuda_graph = cuda_graph
        self._constants: frozenset[str] = frozenset()  # model.inputs, copied to the device once
        self._graph = self._graph_exec = None
        self.last_infer_ms: float | None = None
        self.input_shapes: dict[str, tuple[int, ...]] = {}  # the shapes set on the context for dynamic inputs
        self._specs: dict[str, TensorSpec] = {}
        self._is_input: dict[str, bool] = {}
        self._device: dict[str, int] = {}
        self._host: dict[str, int] = {}
        self._cu = self._engine = self._context = self._stream = None
        self._device_handle = None
        self._stream_handle = 0
        self._events = ()
        self._owned: list[tuple[str, object]] = []  # (free function, handle), released in reverse at close
        self._on_device: set[str] = set()  # tensors a CUDA stage writes or reads on the GPU: never copied

    def open(self) -> None:
        require_cuda_device(BackendError)
        try:
            import tensorrt as trt
        except ImportError:
            raise missing_dependency("tensorrt", "JetPack's python3-libnvinfer (apt) or the TensorRT wheel matching the device") from None
        try:
            from cuda.bindings import driver as cu
        except ImportError:
            raise missing_dependency("cuda.bindings", INSTALL_HINT) from None
        header = read_plan_header(self.engine_path)
        installed = TensorRTVersion.parse(trt.__version__)
        if not header.matches(installed):
            raise BackendError(f"{self.engine_path}: built by TensorRT {header.tensorrt}, this device runs TensorRT {installed}")
        self._cu = cu
        self.call("cuInit", 0)
        self._device_handle = self.call("cuDeviceGet", 0)
        context = self.call("cuDevicePrimaryCtxRetain", self._device_handle)  # the context TensorRT's runtime uses too
        self.own("cuDevicePrimaryCtxRelease", self._device_handle)
        self.call("cuCtxSetCurrent", context)
        runtime = trt.Runtime(trt.Logger(trt.Logger.WARNING))
        if self.dla_core is not None:
            runtime.DLA_core = self.dla_core
        engine = runtime.deserialize_cuda_engine(self.engine_path.read_bytes())
        if engine is None:
            raise BackendError(f"TensorRT could not deserialize {self.engine_path}")
        self._engine = engine
        self._context = engine.create_execution_context()
        tensors = set_input_shapes(trt, engine, self._context, self.batch, self.engine_path)
        self.input_shapes = {t.name: tuple(self._context.get_tensor_shape(t.name)) for t in tensors if t.is_input and t.dynamic}
        self._read_io(trt, tensors)
        if self.profile_layers:
            self._context.profiler = _layer_profiler(trt, self.layer_ms)
        self._stream = self.own("cuStreamDestroy", self.call("cuStreamCreate", cu.CUstream_flags.CU_STREAM_NON_BLOCKING.value))
        self._stream_handle = native_handle(self._stream)  # TensorRT takes the stream as an int
        self._events = tuple(self.own("cuEventDestroy", self.call("cuEventCreate", cu.CUevent_flags.CU_EVENT_DEFAULT.value)) for _ in range(2))
        for name, spec in self._specs.items():
            size = int(np.prod(spec.shape)) * spec.dtype.itemsize
            self._device[name] = device_address(self.own("cuMemFree", self.call("cuMemAlloc", max(1, size))))
            self._host[name] = int(self.own("cuMemFreeHost", self.call("cuMemHostAlloc", max(1, size), 0)))
            buffer = (ctypes.c_byte * size).from_address(self._host[name])
            array = np.frombuffer(buffer, dtype=spec.dtype).reshape(spec.shape)
            (self.inputs if self._is_input[name] else self.outputs)[name] = array
            if not self._context.set_tensor_address(name, self._device[name]):
                raise BackendError(f"TensorRT refused the buffer for {name}")
        if self.cuda_graph:
            self._capture_graph()

    def _capture_graph(self) -> None:
        """TensorRT defers some work to the first launch, so it runs once uncaptured; the buffers
        are bound once, so the captured launch stays valid for every frame."""
        cu = self._cu
        if not self._context.execute_async_v3(self._stream_handle):
            raise BackendError("TensorRT execution failed before CUDA graph capture (see the TensorRT log)")
        self.call("cuStreamSynchronize", self._stream)
        self.call("cuStreamBeginCapture", self._stream, cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        launched = self._context.execute_async_v3(self._stream_handle)
        try:
            graph = self.call("cuStreamEndCapture", self._stream)
        except BackendError as exc:
            ended = exc.message
        else:
            ended = None
            self._graph = self.own("cuGraphDestroy", graph)
        if not launched or ended:
            raise BackendError(
                f"{self.engine_path}: TensorRT's launches cannot be captured into a CUDA graph ({ended or 'enqueue failed'})",
                hint="set model.cuda_graph: false (engines with DLA loadables, loops or data-dependent shapes may not capture)",
            )
        self._graph_exec = self.own("cuGraphExecDestroy", self.call("cuGraphInstantiate", self._graph, 0))

    def _read_io(self, trt, tensors: tuple[EngineTensor, ...]) -> None:
        """Every tensor's shape on the context (the inputs' set, the outputs' inferred from them) and type."""
        for io in tensors:
            shape = resolved(io.name, tuple(self._context.get_tensor_shape(io.name)), self.engine_path)
            self._specs[io.name] = TensorSpec(io.name, shape, np.dtype(trt.nptype(self._engine.get_tensor_dtype(io.name))))
            self._is_input[io.name] = io.is_input
        problems = check_io(self.declared, tuple(self._specs.values()))
        if problems:
            raise ModelError(f"{self.engine_path}: the engine's tensors do not match the pipeline: {'; '.join(problems)}")

    def enqueue(self, timed: bool = True) -> bool:
        """The frame's work on the stream, without waiting: copies in (tensors the GPU does not write), enqueueV3 (or the
        engine's own graph), between the timing events where `timed`, copies out (tensors the GPU does not read). False
        where TensorRT refuses to enqueue (under stream capture: an engine that cannot be captured). Capturable: pinned
        host buffers, fixed addresses; the CUDA path times the engine with its own events (`timed=False`) so that none
        of these is recorded inside its capture (sdk/gpu/session.py)."""
        stream = self._stream
        for name, array in self.inputs.items():
            if name in self._on_device or name in self._constants:
                continue  # written by the CUDA preprocessing kernel earlier on this stream, or copied once
            self.call("cuMemcpyHtoDAsync", self._device[name], self._host[name], array.nbytes, stream)
        if timed:
            self.call("cuEventRecord", self._events[0], stream)
        if self._graph_exec is not None:
            self.call("cuGraphLaunch", self._graph_exec, stream)
        elif not self._context.execute_async_v3(self._stream_handle):
            return False
        if timed:
            self.call("cuEventRecord", self._events[1], stream)
        for name, array in self.outputs.items():
            if name in self._on_device:
                continue  # read by the CUDA decode kernel, later on this stream
            self.call("cuMemcpyDtoHAsync", self._host[name], self._device[name], array.nbytes, stream)
        return True

    def infer(self) -> None:
        if not self.enqueue():
            raise BackendError("TensorRT execution failed (see the TensorRT log)")
        self.call("cuStreamSynchronize", self._stream)
        self.last_infer_ms = float(self.call("cuEventElapsedTime", *self._events))

    @property
    def stream_handle(self) -> int:
        """The backend's CUDA stream (an address): CUDA stages enqueue on it, so one stream orders the frame."""
        return self._stream_handle

    def device_address(self, name: str) -> int:
        """The device buffer bound to a tensor (what a kernel writes or reads in place)."""
        return int(self._device[name])

    def keep_on_device(self, *names: str) -> None:
        """These tensors are produced or consumed on the GPU: infer() copies them neither in nor out."""
        unknown = [n for n in names if n not in self._specs]
        if unknown:
            raise ModelError(f"{self.engine_path}: the engine has no tensor {unknown}")
        self._on_device.update(names)

    def constants_written(self, names: tuple[str, ...]) -> None:
        """model.inputs: copied to the device once, here, and left out of every frame's copies."""
        for name in names:
            self.call("cuMemcpyHtoD", self._device[name], self._host[name], self.inputs[name].nbytes)
        self._constants = frozenset(names)

    def close(self) -> None:
        cu = self._cu
        if cu is None:
            return
        self.inputs.clear()
        self.outputs.clear()
        self._context = self._engine = None  # TensorRT's objects go before the memory and the context they use
        while self._owned:
            free, handle = self._owned.pop()
            getattr(cu, free)(handle)
        self._host, self._device, self._events = {}, {}, ()
        self._graph = self._graph_exec = self._stream = self._cu = None

    @property
    def input_specs(self) -> tuple[TensorSpec, ...]:
        return tuple(s for n, s in self._specs.items() if self._is_input[n])

    @property
    def output_specs(self) -> tuple[TensorSpec, ...]:
        return tuple(s for n, s in self._specs.items() if not self._is_input[n])

    def log_layers(self, log: list) -> None:
        """From now on TensorRT's profiler also appends (layer name, ms) to `log` for every layer of every execution, in
        the order TensorRT reports them (`python -m sdk profile` cuts it into frames)."""
        import tensorrt as trt

        self._context.profiler = _layer_profiler(trt, self.layer_ms, log)

    def layer_information(self) -> dict:
        """The engine inspector's JSON for this execution context: every layer TensorRT built (its name, type,
        precision, tactic; a DLA subgraph as one ForeignNode), as `ProfilingVerbosity.DETAILED` recorded it."""
        import json

        import tensorrt as trt

        inspector = self._engine.create_engine_inspector()
        inspector.execution_context = self._context
        return json.loads(inspector.get_engine_information(trt.LayerInformationFormat.JSON))

    def slowest_layers(self, count: int = 5) -> list[tuple[str, float]]:
        """The layers that took longest (ms summed over the run), from TensorRT's profiler."""
        return sorted(self.layer_ms.items(), key=lambda item: -item[1])[:count]

    def describe(self) -> str:
        where = f"DLA core {self.dla_core}" if self.dla_core is not None else "GPU"
        return f"tensorrt ({where}{', CUDA graph' if self.cuda_graph else ''})"


def engine_tensors(trt, engine) -> tuple[EngineTensor, ...]:
    """The engine's tensors as it declares them (-1 for a dynamic dimension) and, for dynamic inputs, profile 0."""
    tensors = []
    for index in range(engine.num_io_tensors):
        name = engine.get_tensor_name(index)
        shape = tuple(int(d) for d in engine.get_tensor_shape(name))
        is_input = engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT
        profile = None
        if is_input and any(d < 0 for d in shape):
            profile = tuple(tuple(int(d) for d in dims) for dims in engine.get_tensor_profile_shape(name, 0))
        tensors.append(EngineTensor(name, shape, is_input, profile))
    return tuple(tensors)


def set_input_shapes(trt, engine, context, batch: int, where) -> tuple[EngineTensor, ...]:
    """Every dynamic input's shape set on the execution context for `batch` frames per call (decided by
    sdk/backends/tensorrt_shapes.py), before anything is bound or enqueued; returns the engine's tensors."""
    tensors = engine_tensors(trt, engine)
    for name, shape in input_shapes(tensors, batch, where).items():
        if not context.set_input_shape(name, shape):
            raise BackendError(f"{where}: TensorRT refused the shape {list(shape)} for input {name} (see the TensorRT log)")
    return tensors


def _layer_profiler(trt, sink: dict[str, float], log: list | None = None):
    """TensorRT calls report_layer_time once per layer per execution; DLA loadables report as one layer."""

    class LayerTimes(trt.IProfiler):
        def __init__(self) -> None:
            trt.IProfiler.__init__(self)

        def report_layer_time(self, layer_name: str, ms: float) -> None:
            sink[layer_name] = sink.get(layer_name, 0.0) + ms
            if log is not None:
                log.append((layer_name, ms))

    return LayerTimes()


def check_io(declared: tuple[TensorSpec, ...], engine: tuple[TensorSpec, ...]) -> list[str]:
    """What differs between the tensors the pipeline declares and the engine's (empty: they agree)."""
    if not declared:
        return []
    have = {s.name: s for s in engine}
    problems = []
    for spec in declared:
        found = have.get(spec.name)
        if found is None:
            problems.append(f"{spec.name} is missing (engine has {', '.join(sorted(have))})")
        elif not _same_shape(spec.shape, found.shape) or np.dtype(found.dtype) != np.dtype(spec.dtype):
            problems.append(f"{spec.name} is {found.describe()}, the pipeline expects {spec.describe()}")
    extra = sorted(set(have) - {s.name for s in declared})
    if extra:
        problems.append(f"the engine also has {', '.join(extra)}")
    return problems


def _same_shape(declared: tuple, engine: tuple) -> bool:
    """A declared dimension that is not a positive number (a symbolic batch, "N", 0 or -1, as the preparation records
    a dynamic one) matches whatever the engine runs with."""
    return len(declared) == len(engine) and all(not (isinstance(d, int) and d > 0) or d == e for d, e in zip(declared, engine, strict=True))
