"""TensorRT on the device's GPU or a DLA core: an engine built for this device, buffers bound once.

open(): CUDA driver and device checked first (deserializing without one crashes the process), the
plan header checked against the installed TensorRT (a mismatch is named, not a crash), the engine's
IO checked against the tensors the pipeline declares, then every buffer allocated once: device
memory bound to the execution context with set_tensor_address, pinned host memory behind the numpy
arrays callers fill and read. infer(): copy in, execute_async_v3 on the backend's CUDA stream, copy
out, synchronise; CUDA events around the execution give `last_infer_ms` (the GPU/DLA time alone).
With `cuda_graph`, open() captures the engine's launches once into a CUDA graph and infer() replays
it with one launch (less CPU time per frame and less jitter from kernel-launch overhead); an
engine TensorRT cannot capture is an error at open, never a silent fallback.
tensorrt and cuda-python (`cuda.bindings.runtime`) are imported here only, when opened.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np

from sdk.backends.base import Backend, TensorSpec
from sdk.engine.cuda_check import require_cuda_device
from sdk.engine.plan_header import read_plan_header
from sdk.engine.platforms import TensorRTVersion
from sdk.errors import BackendError, ConfigError, ModelError, missing_dependency
from sdk.gpu.handles import native_handle


def _check(result, what: str):
    """cuda-python returns (error, value...): raise on an error, return the value(s)."""
    error, *values = result if isinstance(result, tuple) else (result,)
    if int(error) != 0:
        raise BackendError(f"CUDA {what} failed: {error}")
    return values[0] if len(values) == 1 else values


class TensorRTBackend(Backend):
    name = "tensorrt"

    def __init__(
        self,
        engine_path: Path,
        *,
        declared: tuple[TensorSpec, ...] = (),
        dla_core: int | None = None,
        profile_layers: bool = False,
        cuda_graph: bool = False,
    ) -> None:
        super().__init__()
        self.engine_path = Path(engine_path)
        self.profile_layers = profile_layers  # TensorRT's per-layer profiler: names the bottleneck layers, costs time
        self.layer_ms: dict[str, float] = {}  # summed over every infer() since open
        self.declared = declared  # the tensors the pipeline expects (name, shape, dtype); empty: take the engine's
        self.dla_core = dla_core
        if cuda_graph and profile_layers:
            raise ConfigError(
                "model.cuda_graph and model.profile_layers exclude each other: TensorRT's layer profiler needs an un-captured launch",
                hint="profile without the graph, then run with it",
            )
        self.cuda_graph = cuda_graph
        self._constants: frozenset[str] = frozenset()  # model.inputs, copied to the device once
        self._graph = self._graph_exec = None
        self.last_infer_ms: float | None = None
        self._specs: dict[str, TensorSpec] = {}
        self._is_input: dict[str, bool] = {}
        self._device: dict[str, int] = {}
        self._host: dict[str, int] = {}
        self._cudart = self._engine = self._context = self._stream = None
        self._stream_handle = 0
        self._events = ()
        self._on_device: set[str] = set()  # tensors a CUDA stage writes or reads on the GPU: never copied

    def open(self) -> None:
        require_cuda_device(BackendError)
        try:
            import tensorrt as trt
        except ImportError:
            raise missing_dependency("tensorrt", "JetPack's python3-libnvinfer (apt) or the TensorRT wheel matching the device") from None
        try:
            from cuda.bindings import runtime as cudart
        except ImportError:
            hint = "pip install 'cuda-bindings>=12,<13' on a CUDA 12 driver (JetPack 6), 'cuda-bindings>=13,<14' on CUDA 13"
            raise missing_dependency("cuda.bindings", hint) from None
        header = read_plan_header(self.engine_path)
        installed = TensorRTVersion.parse(trt.__version__)
        if not header.matches(installed):
            raise BackendError(f"{self.engine_path}: built by TensorRT {header.tensorrt}, this device runs TensorRT {installed}")
        self._cudart = cudart
        runtime = trt.Runtime(trt.Logger(trt.Logger.WARNING))
        if self.dla_core is not None:
            runtime.DLA_core = self.dla_core
        engine = runtime.deserialize_cuda_engine(self.engine_path.read_bytes())
        if engine is None:
            raise BackendError(f"TensorRT could not deserialize {self.engine_path}")
        self._engine = engine
        self._read_io(trt, engine)
        self._context = engine.create_execution_context()
        if self.profile_layers:
            self._context.profiler = _layer_profiler(trt, self.layer_ms)
        self._stream = _check(cudart.cudaStreamCreate(), "stream creation")
        self._stream_handle = native_handle(self._stream)  # TensorRT takes the stream as an int
        self._events = (_check(cudart.cudaEventCreate(), "event creation"), _check(cudart.cudaEventCreate(), "event creation"))
        for name, spec in self._specs.items():
            size = int(np.prod(spec.shape)) * spec.dtype.itemsize
            self._device[name] = _check(cudart.cudaMalloc(size), f"allocating {size} bytes for {name}")
            self._host[name] = _check(cudart.cudaMallocHost(size), f"allocating {size} pinned bytes for {name}")
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
        cudart, stream = self._cudart, self._stream
        if not self._context.execute_async_v3(self._stream_handle):
            raise BackendError("TensorRT execution failed before CUDA graph capture (see the TensorRT log)")
        _check(cudart.cudaStreamSynchronize(stream), "stream synchronisation")
        _check(cudart.cudaStreamBeginCapture(stream, cudart.cudaStreamCaptureMode.cudaStreamCaptureModeThreadLocal), "graph capture start")
        launched = self._context.execute_async_v3(self._stream_handle)
        error, graph = cudart.cudaStreamEndCapture(stream)
        if not launched or int(error) != 0:
            if int(error) == 0:
                cudart.cudaGraphDestroy(graph)
            raise BackendError(
                f"{self.engine_path}: TensorRT's launches cannot be captured into a CUDA graph ({error if int(error) else 'enqueue failed'})",
                hint="set model.cuda_graph: false (engines with DLA loadables, loops or data-dependent shapes may not capture)",
            )
        self._graph = graph
        self._graph_exec = _check(cudart.cudaGraphInstantiate(graph, 0), "graph instantiation")

    def _read_io(self, trt, engine) -> None:
        for index in range(engine.num_io_tensors):
            name = engine.get_tensor_name(index)
            shape = tuple(engine.get_tensor_shape(name))
            spec = TensorSpec(name, shape, np.dtype(trt.nptype(engine.get_tensor_dtype(name))))
            if any(d < 1 for d in shape):
                raise ModelError(f"{self.engine_path}: tensor {name} has a dynamic shape {list(shape)}; build with static profiles")
            self._specs[name] = spec
            self._is_input[name] = engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT
        problems = check_io(self.declared, tuple(self._specs.values()))
        if problems:
            raise ModelError(f"{self.engine_path}: the engine's tensors do not match the pipeline: {'; '.join(problems)}")

    def enqueue(self) -> bool:
        """The frame's work on the stream, without waiting: copies in (tensors the GPU does not write), enqueueV3 (or the
        engine's own graph) between the timing events, copies out (tensors the GPU does not read). False where
        TensorRT refuses to enqueue (under stream capture: an engine that cannot be captured). Capturable: pinned
        host buffers, fixed addresses (preprocess.cuda_graph, sdk/gpu/graph.py)."""
        cudart, stream = self._cudart, self._stream
        to_device, to_host = cudart.cudaMemcpyKind.cudaMemcpyHostToDevice, cudart.cudaMemcpyKind.cudaMemcpyDeviceToHost
        for name, array in self.inputs.items():
            if name in self._on_device:
                continue  # written by the CUDA preprocessing kernel, earlier on this stream
            if name in self._constants:
                continue  # copied once, by constants_written()
            _check(cudart.cudaMemcpyAsync(self._device[name], self._host[name], array.nbytes, to_device, stream), "copy in")
        _check(cudart.cudaEventRecord(self._events[0], stream), "event record")
        if self._graph_exec is not None:
            _check(cudart.cudaGraphLaunch(self._graph_exec, stream), "graph launch")
        elif not self._context.execute_async_v3(self._stream_handle):
            return False
        _check(cudart.cudaEventRecord(self._events[1], stream), "event record")
        for name, array in self.outputs.items():
            if name in self._on_device:
                continue  # read by the CUDA decode kernel, later on this stream
            _check(cudart.cudaMemcpyAsync(self._host[name], self._device[name], array.nbytes, to_host, stream), "copy out")
        return True

    def infer(self) -> None:
        cudart = self._cudart
        if not self.enqueue():
            raise BackendError("TensorRT execution failed (see the TensorRT log)")
        _check(cudart.cudaStreamSynchronize(self._stream), "stream synchronisation")
        self.last_infer_ms = _check(cudart.cudaEventElapsedTime(*self._events), "event timing")

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
        cudart = self._cudart
        to_device = cudart.cudaMemcpyKind.cudaMemcpyHostToDevice
        for name in names:
            _check(cudart.cudaMemcpy(self._device[name], self._host[name], self.inputs[name].nbytes, to_device), "copy constant input")
        self._constants = frozenset(names)

    def close(self) -> None:
        cudart = self._cudart
        if cudart is None:
            return
        self.inputs.clear()
        self.outputs.clear()
        if self._graph_exec is not None:
            cudart.cudaGraphExecDestroy(self._graph_exec)
        if self._graph is not None:
            cudart.cudaGraphDestroy(self._graph)
        self._graph = self._graph_exec = None
        for pointer in self._host.values():
            cudart.cudaFreeHost(pointer)
        for pointer in self._device.values():
            cudart.cudaFree(pointer)
        for event in self._events:
            cudart.cudaEventDestroy(event)
        if self._stream is not None:
            cudart.cudaStreamDestroy(self._stream)
        self._host, self._device, self._events = {}, {}, ()
        self._context = self._engine = self._stream = self._cudart = None

    @property
    def input_specs(self) -> tuple[TensorSpec, ...]:
        return tuple(s for n, s in self._specs.items() if self._is_input[n])

    @property
    def output_specs(self) -> tuple[TensorSpec, ...]:
        return tuple(s for n, s in self._specs.items() if not self._is_input[n])

    def slowest_layers(self, count: int = 5) -> list[tuple[str, float]]:
        """The layers that took longest (ms summed over the run), from TensorRT's profiler."""
        return sorted(self.layer_ms.items(), key=lambda item: -item[1])[:count]

    def describe(self) -> str:
        where = f"DLA core {self.dla_core}" if self.dla_core is not None else "GPU"
        return f"tensorrt ({where}{', CUDA graph' if self.cuda_graph else ''})"


def _layer_profiler(trt, sink: dict[str, float]):
    """TensorRT calls report_layer_time once per layer per execution; DLA loadables report as one layer."""

    class LayerTimes(trt.IProfiler):
        def __init__(self) -> None:
            trt.IProfiler.__init__(self)

        def report_layer_time(self, layer_name: str, ms: float) -> None:
            sink[layer_name] = sink.get(layer_name, 0.0) + ms

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
        elif tuple(found.shape) != tuple(spec.shape) or np.dtype(found.dtype) != np.dtype(spec.dtype):
            problems.append(f"{spec.name} is {found.describe()}, the pipeline expects {spec.describe()}")
    extra = sorted(set(have) - {s.name for s in declared})
    if extra:
        problems.append(f"the engine also has {', '.join(extra)}")
    return problems
