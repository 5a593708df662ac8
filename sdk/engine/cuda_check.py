"""Is there a CUDA driver and a device? Asked before any TensorRT runtime or builder exists.

Without a driver, deserializing an engine crashes the process instead of raising; so every path
into TensorRT calls `require_cuda_device` first. Standard library only (ctypes on libcuda).
"""

from __future__ import annotations

import ctypes

from sdk.errors import SdkError

DRIVER_LIBRARY = "libcuda.so.1"


def require_cuda_device(error: type[SdkError], library: str = DRIVER_LIBRARY) -> int:
    """The number of CUDA devices; raise `error` naming what is missing when there is none."""
    try:
        cuda = ctypes.CDLL(library)
    except OSError:
        raise error(
            f"no CUDA driver on this machine ({library} not found): TensorRT cannot run here",
            hint="build and run engines on the target (Jetson/DRIVE) or a machine with an NVIDIA GPU and driver",
        ) from None
    status = cuda.cuInit(0)
    if status != 0:
        raise error(f"the CUDA driver failed to initialise (cuInit returned {status}): no usable GPU", hint="check the driver: nvidia-smi")
    count = ctypes.c_int(0)
    status = cuda.cuDeviceGetCount(ctypes.byref(count))
    if status != 0 or count.value < 1:
        raise error(f"the CUDA driver sees no device (cuDeviceGetCount returned {status}, {count.value} devices)", hint="check the GPU (nvidia-smi)")
    return count.value
