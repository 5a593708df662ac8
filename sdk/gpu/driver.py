"""The CUDA adapter: maps a PreprocessPlan onto cuda-python driver calls. Nothing is decided here.

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
from sdk.gpu.binaries import ImageChoice, KernelManifest, choose_image, load_image
from sdk.gpu.params import kernel_arguments
from sdk.gpu.plan import PreprocessPlan

INSTALL_HINT = "pip install 'perception-deploy-sdk[cuda]'  (on Jetson: JetPack's CUDA driver plus cuda-bindings)"
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
    "CUstream_flags",
    "cuEventCreate",
    "cuEventRecord",
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
    "cuGetErrorName",
    "CUresult",
    "CU_MEMHOSTALLOC_DEVICEMAP",
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


class CudaPreprocessor:
    """One plan, its module, stream, events and buffers; `__call__` runs one frame and returns the kernel time (ms)."""

    def __init__(self, plan: PreprocessPlan, kernels_dir: Path, device: int = 0) -> None:
        self.plan = plan
        self.kernels_dir = Path(kernels_dir)
        self.device_index = device
        self.choice: ImageChoice | None = None
        self.memory: str | None = None
        self._cu = None
        self._owned: list[tuple[str, object]] = []  # (free function name, handle), released in reverse

    def _call(self, name: str, *args):
        result = getattr(self._cu, name)(*args)
        err, rest = result[0], result[1:]
        if err != self._cu.CUresult.CUDA_SUCCESS:
            _, text = self._cu.cuGetErrorName(err)
            raise BackendError(f"{name} failed: {text.decode() if isinstance(text, bytes) else text}")
        return rest[0] if len(rest) == 1 else rest

    def open(self) -> CudaPreprocessor:
        cu = self._cu = import_driver()
        self._call("cuInit", 0)
        device = self._call("cuDeviceGet", self.device_index)
        attr = cu.CUdevice_attribute
        cc = (
            self._call("cuDeviceGetAttribute", attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device),
            self._call("cuDeviceGetAttribute", attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device),
        )
        integrated = self._call("cuDeviceGetAttribute", attr.CU_DEVICE_ATTRIBUTE_INTEGRATED, device)
        can_map = self._call("cuDeviceGetAttribute", attr.CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, device)
        self._device = device
        self._context = self._call("cuDevicePrimaryCtxRetain", device)
        self._owned.append(("cuDevicePrimaryCtxRelease", device))
        self._call("cuCtxSetCurrent", self._context)
        manifest_path = self.kernels_dir / "preprocess.json"
        manifest = KernelManifest.load(manifest_path) if manifest_path.is_file() else None
        available = {p.name for p in self.kernels_dir.iterdir()} if self.kernels_dir.is_dir() else set()
        self.choice = choose_image(manifest, cc, self._call("cuDriverGetVersion"), available)
        if self.choice.kind == "nvrtc":
            from sdk.gpu.nvrtc import compile_source

            image = compile_source(self.kernels_dir, self.choice.arch).cubin
        else:
            image = load_image(self.kernels_dir, self.choice)
        self._module = self._call("cuModuleLoadData", image)
        self._owned.append(("cuModuleUnload", self._module))
        self._function = self._call("cuModuleGetFunction", self._module, self.plan.kernel.encode())
        self._stream = self._call("cuStreamCreate", cu.CUstream_flags.CU_STREAM_NON_BLOCKING.value)
        self._owned.append(("cuStreamDestroy", self._stream))
        self._events = []
        for _ in range(2):
            event = self._call("cuEventCreate", cu.CUevent_flags.CU_EVENT_DEFAULT.value)
            self._owned.append(("cuEventDestroy", event))
            self._events.append(event)
        self.memory = input_memory(bool(integrated), bool(can_map))
        self._allocate()
        return self

    def _allocate(self) -> None:
        plan = self.plan
        total = plan.source_bytes + plan.uv_bytes
        host = self._call("cuMemHostAlloc", total, self._cu.CU_MEMHOSTALLOC_DEVICEMAP if self.memory == "mapped" else 0)
        self._owned.append(("cuMemFreeHost", host))
        self._host = int(host)
        # The frame buffer a reader decodes into: source bytes, then the NV12 chroma plane.
        self.input_array = np.frombuffer((ctypes.c_ubyte * total).from_address(self._host), np.uint8)
        if self.memory == "mapped":
            self._source = int(self._call("cuMemHostGetDevicePointer", self._host, 0))
        else:
            self._source = int(self._call("cuMemAlloc", total))
            self._owned.append(("cuMemFree", self._source))
        self._output = int(self._call("cuMemAlloc", plan.output_bytes))
        self._owned.append(("cuMemFree", self._output))
        uv = self._source + plan.source_bytes if plan.uv_bytes else 0
        self._params = plan.bound(self._source, self._output, uv)
        self._args, self._args_address = kernel_arguments(self._params)

    @property
    def output_pointer(self) -> int:
        """Device address of the output tensor (what an inference engine binds)."""
        return self._output

    def __call__(self, frame: np.ndarray | None = None) -> float:
        """Run one frame (already in input_array when frame is None); returns the kernel's time in ms."""
        if frame is not None:
            np.copyto(self.input_array, frame.reshape(-1).view(np.uint8))
        start, stop = self._events
        if self.memory == "copy":
            self._call("cuMemcpyHtoDAsync", self._source, self._host, self.input_array.nbytes, self._stream)
        self._call("cuEventRecord", start, self._stream)
        grid, block = self.plan.grid, self.plan.block
        self._call("cuLaunchKernel", self._function, *grid, *block, 0, self._stream, self._args_address, 0)
        self._call("cuEventRecord", stop, self._stream)
        self._call("cuEventSynchronize", stop)
        return float(self._call("cuEventElapsedTime", start, stop))

    def download(self) -> np.ndarray:
        out = np.empty(self.plan.output_shape, self.plan.numpy_dtype)
        self._call("cuMemcpyDtoHAsync", out.ctypes.data, self._output, out.nbytes, self._stream)
        self._call("cuStreamSynchronize", self._stream)
        return out

    def close(self) -> None:
        while self._owned:
            name, handle = self._owned.pop()
            getattr(self._cu, name)(handle)

    def __enter__(self) -> CudaPreprocessor:
        return self.open()

    def __exit__(self, *exc) -> None:
        self.close()
