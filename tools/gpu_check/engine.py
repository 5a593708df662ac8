"""ONNX Runtime on the CPU as the inference step of the runtime's real CUDA path, for tools/gpu_check/check.py.

A lent GPU machine has no TensorRT, but the runtime's CUDA path (the fused kernel writing the engine's input
binding in place, the decode kernel reading its outputs in place, one stream, event times, the frame's CUDA graph)
needs an engine whose tensors are in GPU memory. This backend gives it one: device buffers stand for the bindings,
and between the CUDA stages the stream copies the input binding into page-locked memory, ONNX Runtime runs on the
host, and the outputs are copied back into their bindings.

Un-captured, the host waits for the input copy (cuStreamSynchronize) and runs ONNX Runtime in `enqueue`. Inside a
stream capture it cannot wait, so ONNX Runtime runs as a host node (cuLaunchHostFunc: "The host function must not
make any CUDA API calls", which ONNX Runtime on the CPU does not), between captured copies from and to page-locked
memory (the only host memory a graph copies). Driver API only (DRIVER_NAMES, checked against cuda-bindings).

The host node is launched through the driver library's own `cuLaunchHostFunc` (libcuda.so.1, by ctypes), not
cuda-bindings' wrapper of it: that wrapper hands the driver a trampoline whose data it frees after the first call, so a
captured graph's second replay calls freed memory (github.com/NVIDIA/cuda-python/issues/790; a lent H200 ended the graph run with
SIGSEGV). The driver keeps the function and its (here null) data in the graph's node and calls them on every replay.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np

from sdk.backends.base import Backend, TensorSpec
from sdk.backends.onnxruntime_cpu import OnnxRuntimeBackend
from sdk.errors import BackendError
from sdk.gpu.driver_calls import BASE_DRIVER_NAMES, DriverCalls
from sdk.gpu.handles import device_address, native_handle

DRIVER_NAMES = BASE_DRIVER_NAMES + ("cuStreamIsCapturing", "CUstreamCaptureStatus")
HOST_FUNCTION = ctypes.CFUNCTYPE(None, ctypes.c_void_p)  # CUhostFn: void (*)(void *userData)


def driver_library() -> ctypes.CDLL:
    """libcuda.so.1, the library cuda-bindings itself loads, for the one call its wrapper gets wrong in a graph."""
    library = ctypes.CDLL("libcuda.so.1")
    library.cuLaunchHostFunc.argtypes = (ctypes.c_void_p, HOST_FUNCTION, ctypes.c_void_p)
    library.cuLaunchHostFunc.restype = ctypes.c_int
    return library


class OnnxRuntimeOnGpu(DriverCalls, Backend):
    """The bindings on the GPU, the inference on the CPU, in stream order."""

    name = "onnxruntime-on-gpu"
    device_bindings = True

    def __init__(self, model_path: Path, batch: int = 1, threads: int | None = None) -> None:
        super().__init__()
        self.ort = OnnxRuntimeBackend(model_path, threads=threads, batch=batch)
        self._cu = None
        self._owned: list[tuple[str, object]] = []
        self._device: dict[str, int] = {}
        self._staging: dict[str, np.ndarray] = {}  # page-locked copies of the bindings, what the stream copies
        self._on_device: set[str] = set()
        self._stream = None
        self._stream_handle = 0
        self._callback = HOST_FUNCTION(self._host_node)  # kept alive: the driver calls it from its own thread
        self._host_error: BaseException | None = None
        self.host_nodes = 0  # host functions launched (one per captured frame's replay)

    def open(self) -> None:
        from cuda.bindings import driver as cu

        self.ort.open()
        self.inputs, self.outputs = self.ort.inputs, self.ort.outputs
        self._cu = cu
        self.call("cuInit", 0)
        device = self.call("cuDeviceGet", 0)
        context = self.call("cuDevicePrimaryCtxRetain", device)
        self.own("cuDevicePrimaryCtxRelease", device)
        self.call("cuCtxSetCurrent", context)
        self._stream = self.own("cuStreamDestroy", self.call("cuStreamCreate", cu.CUstream_flags.CU_STREAM_NON_BLOCKING.value))
        self._stream_handle = native_handle(self._stream)
        for name, array in (*self.inputs.items(), *self.outputs.items()):
            self._device[name] = device_address(self.own("cuMemFree", self.call("cuMemAlloc", max(1, array.nbytes))))
            host = int(self.own("cuMemFreeHost", self.call("cuMemHostAlloc", max(1, array.nbytes), 0)))
            raw = np.frombuffer((ctypes.c_ubyte * array.nbytes).from_address(host), np.uint8)
            self._staging[name] = raw.view(array.dtype).reshape(array.shape)

    @property
    def stream_handle(self) -> int:
        return self._stream_handle

    def keep_on_device(self, *names: str) -> None:
        unknown = [n for n in names if n not in self._device]
        if unknown:
            raise BackendError(f"the model has no tensor {unknown}")
        self._on_device.update(names)

    def device_address(self, name: str) -> int:
        return self._device[name]

    def _host_work(self) -> None:
        for name in self._on_device & set(self.inputs):
            np.copyto(self.inputs[name], self._staging[name])
        self.ort.infer()
        for name in self._on_device & set(self.outputs):
            np.copyto(self._staging[name], self.outputs[name])

    def _host_node(self, _data) -> None:
        try:
            self._host_work()
        except BaseException as exc:  # noqa: BLE001 - an exception cannot cross the driver's thread: raised at the next wait
            self._host_error = exc

    def _launch_host_node(self) -> None:
        """The captured host node: ONNX Runtime between the captured copies, on every replay of the graph."""
        error = driver_library().cuLaunchHostFunc(self._stream_handle, self._callback, None)
        if error != 0:
            _, name = self._cu.cuGetErrorName(self._cu.CUresult(error))
            raise BackendError(f"cuLaunchHostFunc failed: {name.decode() if isinstance(name, bytes) else name}")
        self.host_nodes += 1

    def enqueue(self, timed: bool = False) -> bool:  # noqa: ARG002 - the CUDA path times the engine with its own events
        cu, stream = self._cu, self._stream
        for name in self._on_device & set(self.inputs):
            self.call("cuMemcpyDtoHAsync", self._staging[name].ctypes.data, self._device[name], self._staging[name].nbytes, stream)
        status = self.call("cuStreamIsCapturing", stream)
        if status != cu.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE:
            self._launch_host_node()
        else:
            self.call("cuStreamSynchronize", stream)
            self._host_work()
        for name in self._on_device & set(self.outputs):
            self.call("cuMemcpyHtoDAsync", self._device[name], self._staging[name].ctypes.data, self._staging[name].nbytes, stream)
        return True

    def infer(self) -> None:
        self.enqueue()
        self.call("cuStreamSynchronize", self._stream)
        self.raise_host_error()

    def raise_host_error(self) -> None:
        if self._host_error is not None:
            error, self._host_error = self._host_error, None
            raise BackendError(f"ONNX Runtime failed in the stream's host node: {type(error).__name__}: {error}")

    def close(self) -> None:
        self.ort.close()
        cu = self._cu
        while cu is not None and self._owned:
            free, handle = self._owned.pop()
            getattr(cu, free)(handle)
        self._staging, self._device, self._cu = {}, {}, None

    @property
    def input_specs(self) -> tuple[TensorSpec, ...]:
        return self.ort.input_specs

    @property
    def output_specs(self) -> tuple[TensorSpec, ...]:
        return self.ort.output_specs

    def describe(self) -> str:
        return f"{self.ort.describe()} as the inference step of the CUDA path (bindings in GPU memory, gpu_check)"
