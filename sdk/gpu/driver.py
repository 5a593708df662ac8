"""The CUDA adapter: maps the plans (PreprocessPlan, SsdDecodePlan) onto cuda-python driver calls. Nothing is decided here.

Runs only where a driver and a GPU exist (tests marked `gpu`). cuda-python is imported when a
preprocessor opens, never at import time. Memory (ARCHITECTURE.md, "zero copy on Jetson"):
on an integrated GPU (Jetson, DRIVE) the frame buffer is pinned host memory mapped into the
GPU's address space, so the kernel reads the camera frame where the CPU wrote it; on a discrete
GPU the same pinned buffer is copied once per frame on the stream before the launch.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np

from sdk.errors import BackendError, missing_dependency
from sdk.gpu.binaries import ImageChoice, KernelManifest, check_nvrtc_for_driver, choose_image, load_image
from sdk.gpu.decode import SsdDecodePlan, YoloDecodePlan
from sdk.gpu.driver_calls import DriverCalls
from sdk.gpu.graph import GRAPH_NAMES
from sdk.gpu.handles import device_address
from sdk.gpu.params import kernel_arguments
from sdk.gpu.plan import PreprocessPlan

INSTALL_HINT = "pip install 'perception-deploy-sdk[cuda12]' on a CUDA 12 driver (JetPack 6), '[cuda13]' on CUDA 13 (JetPack 7)"
# Every name of cuda.bindings.driver used below; a test checks them against the installed package.
DRIVER_NAMES = (
    "cuInit",
    "cuDriverGetVersion",
    "cuDeviceGet",
    "cuDeviceGetAttribute",
    "CUdevice_attribute",
    "cuDevicePrimaryCtxRetain",
    "cuDevicePrimaryCtxRelease",
    "cuCtxSetCurrent",
    "cuModuleLoadData",
    "cuModuleGetFunction",
    "cuModuleUnload",
    "cuStreamCreate",
    "cuStreamSynchronize",
    "cuStreamDestroy",
    "CUstream",
    "CUstream_flags",
    "cuEventCreate",
    "cuEventRecord",
    "cuEventRecordWithFlags",
    "CUevent_record_flags",
    "cuEventSynchronize",
    "cuEventElapsedTime",
    "cuEventDestroy",
    "CUevent_flags",
    "cuLaunchKernel",
    "cuMemAlloc",
    "cuMemFree",
    "cuMemHostAlloc",
    "cuMemHostGetDevicePointer",
    "cuMemFreeHost",
    "cuMemcpyHtoDAsync",
    "cuMemcpyDtoHAsync",
    "cuMemsetD32Async",
    "cuGetErrorName",
    "CUresult",
    "CU_MEMHOSTALLOC_DEVICEMAP",
    *GRAPH_NAMES,  # stream capture of one frame (sdk/gpu/graph.py)
)
DRIVER_ATTRIBUTES = (
    "CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR",
    "CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR",
    "CU_DEVICE_ATTRIBUTE_INTEGRATED",
    "CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY",
)


def input_memory(integrated: bool, can_map_host_memory: bool) -> str:
    """ "mapped": the kernel reads the pinned frame buffer in place (unified memory SoC); "copy": one H2D copy."""
    return "mapped" if integrated and can_map_host_memory else "copy"


def import_driver():
    try:
        from cuda.bindings import driver
    except ImportError as error:
        raise missing_dependency("cuda.bindings.driver", INSTALL_HINT) from error
    return driver


class CudaModule(DriverCalls):
    """The device's context, the kernels module it can load, one stream and a pair of timing events.

    `stream`: the address of a stream to run on (the TensorRT backend's, so that preprocessing,
    enqueueV3 and decoding share one stream); None creates one.
    """

    emulated = False

    def __init__(self, kernels_dir: Path, device: int = 0, stream: int | None = None) -> None:
        self.kernels_dir = Path(kernels_dir)
        self.device_index = device
        self._adopted_stream = stream
        self.choice: ImageChoice | None = None
        self.memory: str | None = None
        self._cu = None
        self._owned: list[tuple[str, object]] = []  # (free function name, handle), released in reverse
        self.capturing = False  # the stream is being captured (between begin_capture and end_capture)

    def open(self) -> CudaModule:
        cu = self._cu = import_driver()
        call = self.call
        call("cuInit", 0)
        device = call("cuDeviceGet", self.device_index)
        attr = cu.CUdevice_attribute
        cc = (
            call("cuDeviceGetAttribute", attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device),
            call("cuDeviceGetAttribute", attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device),
        )
        integrated = call("cuDeviceGetAttribute", attr.CU_DEVICE_ATTRIBUTE_INTEGRATED, device)
        can_map = call("cuDeviceGetAttribute", attr.CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, device)
        self.memory = input_memory(bool(integrated), bool(can_map))
        context = call("cuDevicePrimaryCtxRetain", device)
        self.own("cuDevicePrimaryCtxRelease", device)
        call("cuCtxSetCurrent", context)
        manifest_path = self.kernels_dir / "preprocess.json"
        manifest = KernelManifest.load(manifest_path) if manifest_path.is_file() else None
        available = {p.name for p in self.kernels_dir.iterdir()} if self.kernels_dir.is_dir() else set()
        driver_version = call("cuDriverGetVersion")
        self.choice = choose_image(manifest, cc, driver_version, available)
        if self.choice.kind == "nvrtc":
            from sdk.gpu.nvrtc import compile_source, nvrtc_version

            check_nvrtc_for_driver(nvrtc_version(), driver_version)
            image = compile_source(self.kernels_dir, self.choice.arch).cubin
        else:
            image = load_image(self.kernels_dir, self.choice)
        # By address: the driver copies the image during the call.
        image_buffer = np.frombuffer(image, np.uint8)
        self.module = self.own("cuModuleUnload", call("cuModuleLoadData", image_buffer.ctypes.data))
        if self._adopted_stream is not None:
            self.stream = cu.CUstream(self._adopted_stream)  # the backend owns and destroys it
        else:
            self.stream = self.own("cuStreamDestroy", call("cuStreamCreate", cu.CUstream_flags.CU_STREAM_NON_BLOCKING.value))
        self.events = [self.own("cuEventDestroy", call("cuEventCreate", cu.CUevent_flags.CU_EVENT_DEFAULT.value)) for _ in range(2)]
        return self

    def function(self, name: str):
        return self.call("cuModuleGetFunction", self.module, name.encode())

    def device_buffer(self, nbytes: int) -> int:
        return device_address(self.own("cuMemFree", self.call("cuMemAlloc", max(1, nbytes))))

    def pinned_buffer(self, nbytes: int, mapped: bool) -> tuple[np.ndarray, int]:
        """Pinned host memory as a uint8 array, and the address the GPU reads it at (mapped) or 0."""
        flags = self._cu.CU_MEMHOSTALLOC_DEVICEMAP if mapped else 0
        host = int(self.own("cuMemFreeHost", self.call("cuMemHostAlloc", max(1, nbytes), flags)))  # a host address (void**), an int
        array = np.frombuffer((ctypes.c_ubyte * nbytes).from_address(host), np.uint8)
        return array, (device_address(self.call("cuMemHostGetDevicePointer", host, 0)) if mapped else 0)

    def upload(self, device: int, host: np.ndarray) -> None:
        self.call("cuMemcpyHtoDAsync", device, host.ctypes.data, host.nbytes, self.stream)

    def download(self, host: np.ndarray, device: int) -> None:
        self.call("cuMemcpyDtoHAsync", host.ctypes.data, device, host.nbytes, self.stream)

    def launch(self, function, grid: tuple[int, int, int], block: tuple[int, int, int], params: ctypes.Structure) -> None:
        """Enqueue one launch between the two events (kernel time: elapsed_ms after synchronize)."""
        _pointers, address = kernel_arguments(params)  # keeps the pointer array alive for the call
        start, stop = self.events
        self.call("cuEventRecord", start, self.stream)
        self.call("cuLaunchKernel", function, *grid, *block, 0, self.stream, address, 0)
        self.call("cuEventRecord", stop, self.stream)

    def enqueue(self, function, grid: tuple[int, int, int], block: tuple[int, int, int], params: ctypes.Structure) -> None:
        """Enqueue one launch on the stream, without events (the runtime records its own per stage)."""
        _pointers, address = kernel_arguments(params)
        self.call("cuLaunchKernel", function, *grid, *block, 0, self.stream, address, 0)

    def event(self):
        return self.own("cuEventDestroy", self.call("cuEventCreate", self._cu.CUevent_flags.CU_EVENT_DEFAULT.value))

    def record(self, event, external: bool = False) -> None:
        """cuEventRecord; inside a capture with CU_EVENT_RECORD_EXTERNAL (`external`), so that the event becomes an
        event record node that every launch of the graph records (a plain record there is no node, and reading the
        event afterwards is CUDA_ERROR_CAPTURED_EVENT). The flag is invalid outside a capture (cuda.h)."""
        if external:
            flag = self._cu.CUevent_record_flags.CU_EVENT_RECORD_EXTERNAL.value
            self.call("cuEventRecordWithFlags", event, self.stream, flag)
        else:
            self.call("cuEventRecord", event, self.stream)

    def event_ms(self, start, stop) -> float:
        """GPU time between two recorded events (waits for the later one)."""
        self.call("cuEventSynchronize", stop)
        return float(self.call("cuEventElapsedTime", start, stop))

    def memset32(self, device: int, value: int, count: int) -> None:
        self.call("cuMemsetD32Async", device, value, count, self.stream)

    def bind(self, array, what: str) -> int:  # noqa: ARG002 - the emulated device's hook; bindings on a GPU come from the engine
        raise BackendError(f"{what}: a GPU binding's address comes from the TensorRT backend, not from a host array")

    def describe(self) -> str:
        choice = self.choice
        return f"CUDA device {self.device_index}, kernels: {choice.kind} sm_{choice.arch} ({choice.reason}), {self.memory} input memory"

    def elapsed_ms(self) -> float:
        start, stop = self.events
        self.call("cuEventSynchronize", stop)
        return float(self.call("cuEventElapsedTime", start, stop))

    def synchronize(self) -> None:
        self.call("cuStreamSynchronize", self.stream)

    # Stream capture (sdk/gpu/graph.py): the frame's work on this stream, captured once, replayed per frame.
    def begin_capture(self) -> None:
        self.call("cuStreamBeginCapture", self.stream, self._cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        self.capturing = True

    def end_capture(self):
        self.capturing = False
        return self.own("cuGraphDestroy", self.call("cuStreamEndCapture", self.stream))

    def instantiate(self, graph):
        return self.own("cuGraphExecDestroy", self.call("cuGraphInstantiate", graph, 0))

    def launch_graph(self, graph_exec) -> None:
        self.call("cuGraphLaunch", graph_exec, self.stream)

    def close(self) -> None:
        while self._owned:
            name, handle = self._owned.pop()
            getattr(self._cu, name)(handle)

    def __enter__(self) -> CudaModule:
        return self.open()

    def __exit__(self, *exc) -> None:
        self.close()


class CudaPreprocessor:
    """One plan's buffers on an open CudaModule; `__call__` runs one frame and returns the kernel time (ms)."""

    def __init__(self, plan: PreprocessPlan, cuda: CudaModule) -> None:
        self.plan, self.cuda = plan, cuda
        total = plan.source_bytes + plan.uv_bytes
        mapped = cuda.memory == "mapped"
        # The frame buffer a reader decodes into: source bytes, then the NV12 chroma plane.
        self.input_array, source = cuda.pinned_buffer(total, mapped)
        self._source = source if mapped else cuda.device_buffer(total)
        self._output = cuda.device_buffer(plan.output_bytes)
        uv = self._source + plan.source_bytes if plan.uv_bytes else 0
        self._params = plan.bound(self._source, self._output, uv)
        self._function = cuda.function(plan.kernel)

    @property
    def output_pointer(self) -> int:
        """Device address of the output tensor (what an inference engine binds)."""
        return self._output

    def __call__(self, frame: np.ndarray | None = None) -> float:
        """Run one frame (already in input_array when frame is None); returns the kernel's time in ms."""
        if frame is not None:
            np.copyto(self.input_array, frame.reshape(-1).view(np.uint8))
        if self.cuda.memory == "copy":
            self.cuda.upload(self._source, self.input_array)
        self.cuda.launch(self._function, self.plan.grid, self.plan.block, self._params)
        return self.cuda.elapsed_ms()

    def enqueue(self) -> None:
        """The frame's work on the stream, without events or waiting (what a CUDA graph captures)."""
        if self.cuda.memory == "copy":
            self.cuda.upload(self._source, self.input_array)
        self.cuda.enqueue(self._function, self.plan.grid, self.plan.block, self._params)

    def download(self) -> np.ndarray:
        out = np.empty(self.plan.output_shape, self.plan.numpy_dtype)
        self.cuda.download(out, self._output)
        self.cuda.synchronize()
        return out


class _CudaDecoder:
    """Candidate buffers on the GPU and their host copies; subclasses bind the model's outputs."""

    def __init__(self, plan, cuda: CudaModule) -> None:
        self.plan, self.cuda = plan, cuda
        self.host = plan.output_buffers()
        self._device = {name: cuda.device_buffer(array.nbytes) for name, array in self.host.items()}
        self._function = cuda.function(plan.kernel)

    def _outputs(self) -> tuple[int, int, int, int]:
        d = self._device
        return d["boxes"], d["scores"], d["classes"], d["count"]

    def _run(self, uploads: list[tuple[int, np.ndarray | None]]):
        """Upload what is given, decode, download; returns (boxes, scores, classes, found) views of host buffers."""
        cuda = self.cuda
        for device, array in uploads:
            if array is not None:
                cuda.upload(device, np.ascontiguousarray(array, np.float32))
        cuda.memset32(self._device["count"], 0, 1)
        cuda.launch(self._function, self.plan.grid, self.plan.block, self._params)
        for name, array in self.host.items():
            cuda.download(array, self._device[name])
        cuda.synchronize()
        found = int(self.host["count"][0])
        n = min(found, self.plan.capacity)
        return self.host["boxes"][:n], self.host["scores"][:n], self.host["classes"][:n], found


class CudaSsdDecoder(_CudaDecoder):
    """SSD candidates on the GPU from the engine's output buffers; NMS follows on the host (Detections.select)."""

    def __init__(self, plan: SsdDecodePlan, cuda: CudaModule) -> None:
        super().__init__(plan, cuda)
        count, classes = plan.params.count, plan.params.classes
        self.encodings = cuda.device_buffer(count * 4 * 4)
        self.logits = cuda.device_buffer(count * classes * 4)
        anchors = cuda.device_buffer(plan.anchors.nbytes)
        cuda.upload(anchors, plan.anchors)  # once: the anchors are constants of the model
        self._params = plan.bound(self.encodings, self.logits, anchors, *self._outputs())

    def __call__(self, encodings: np.ndarray | None = None, logits: np.ndarray | None = None):
        return self._run([(self.encodings, encodings), (self.logits, logits)])


class CudaYoloDecoder(_CudaDecoder):
    """YOLO (v5 / v8 layout) candidates on the GPU; NMS follows on the host."""

    def __init__(self, plan: YoloDecodePlan, cuda: CudaModule) -> None:
        super().__init__(plan, cuda)
        self.rows = cuda.device_buffer(plan.input_bytes)
        self._params = plan.bound(self.rows, *self._outputs())

    def __call__(self, output: np.ndarray | None = None):
        return self._run([(self.rows, output)])
