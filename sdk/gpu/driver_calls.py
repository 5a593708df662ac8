"""cuda.bindings.driver calls, checked: every call returns (CUresult, values...), and anything but CUDA_SUCCESS is a
BackendError naming the call and the result; handles a call made are released in reverse order at close. Shared by
the CUDA module (sdk/gpu/driver.py), the TensorRT backend and the GPU check's engine (tools/gpu_check/engine.py)."""

from __future__ import annotations

from sdk.errors import BackendError

# The driver calls every user of DriverCalls makes: the primary context, one stream, device and page-locked host memory
# and the copies between them, error names. Each user lists these plus its own (its DRIVER_NAMES, checked by a test
# against the installed cuda-bindings and against every name the code passes to call and own).
BASE_DRIVER_NAMES = (
    "cuInit",
    "cuDeviceGet",
    "cuDevicePrimaryCtxRetain",
    "cuDevicePrimaryCtxRelease",
    "cuCtxSetCurrent",
    "cuStreamCreate",
    "CUstream_flags",
    "cuStreamSynchronize",
    "cuStreamDestroy",
    "cuMemAlloc",
    "cuMemFree",
    "cuMemHostAlloc",
    "cuMemFreeHost",
    "cuMemcpyHtoDAsync",
    "cuMemcpyDtoHAsync",
    "cuGetErrorName",
    "CUresult",
)


def checked_call(cu, name: str, *args):
    """The value(s) of `cu.<name>(*args)`, or BackendError naming the call and its CUresult."""
    error, *values = getattr(cu, name)(*args)
    if error != cu.CUresult.CUDA_SUCCESS:
        _, text = cu.cuGetErrorName(error)
        raise BackendError(f"{name} failed: {text.decode() if isinstance(text, bytes) else text}")
    return values[0] if len(values) == 1 else tuple(values)


class DriverCalls:
    """A mixin: `call` and `own` for an object with `_cu` (the driver module) and `_owned` (a list)."""

    def call(self, name: str, *args):
        return checked_call(self._cu, name, *args)

    def own(self, free: str, handle):
        self._owned.append((free, handle))
        return handle


__all__ = ["BASE_DRIVER_NAMES", "DriverCalls", "checked_call"]
