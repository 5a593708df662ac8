"""Python ints from cuda-bindings objects, in the forms cuda-bindings 13 keeps.

cuda-bindings 12.9.1 and 13.0.0 release notes: "Using int(cuda_obj) to retrieve the underlying address of a
CUDA object is deprecated and subject to future removal. Please switch to use get_cuda_native_handle()
instead." That concerns handle objects (CUstream, cudaStream_t, CUevent, ...): `native_handle` uses
`cuda.bindings.utils.get_cuda_native_handle`, and `int()` only on bindings older than that module
(cuda-bindings 12.8, which a JetPack 6 Python 3.10 may get).

CUdeviceptr is not a handle but a value (a device address); cuda-bindings registers no native-handle
getter for it (get_cuda_native_handle raises "Unknown type"), and its `__int__` is its value:
`device_address` is that conversion, named. tests/sdk/gpu/test_handles.py checks both against the
installed cuda-bindings.
"""

from __future__ import annotations


def native_handle(handle) -> int:
    """The address a CUDA handle object wraps (a stream to hand to TensorRT, for one)."""
    if isinstance(handle, int):
        return handle
    try:
        from cuda.bindings.utils import get_cuda_native_handle
    except ImportError:  # cuda-bindings before 12.9.1 / 13.0.0 has no utils module: int() is its only form
        return int(handle)
    return get_cuda_native_handle(handle)


def device_address(pointer) -> int:
    """A CUdeviceptr's value (cuMemAlloc, cuMemHostGetDevicePointer) as a Python int."""
    return pointer if isinstance(pointer, int) else int(pointer)
