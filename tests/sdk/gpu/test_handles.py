"""Ints from cuda-bindings objects in the forms cuda-bindings 13 keeps, checked against the installed package.

cuda-bindings 13.0.0 release notes (and 12.9.1): "Using int(cuda_obj) to retrieve the underlying address of a
CUDA object is deprecated and subject to future removal. Please switch to use get_cuda_native_handle() instead."
"""

from __future__ import annotations

import sys
import warnings

import pytest

from sdk.gpu.handles import device_address, native_handle

bindings = pytest.importorskip("cuda.bindings", reason="cuda-bindings is not installed")


def test_a_stream_handed_to_tensorrt_goes_through_get_cuda_native_handle():
    from cuda.bindings import driver, runtime
    from cuda.bindings.utils import get_cuda_native_handle

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert native_handle(runtime.cudaStream_t(0x5000)) == 0x5000 == get_cuda_native_handle(runtime.cudaStream_t(0x5000))
        assert native_handle(driver.CUstream(0x6000)) == 0x6000
        assert native_handle(0x7000) == 0x7000  # already an int (the legacy default stream, 0)


def test_a_device_pointer_is_a_value_not_a_handle():
    """cuda-bindings registers no native-handle getter for CUdeviceptr: its int() is its value, the form it keeps."""
    from cuda.bindings import driver
    from cuda.bindings.utils import get_cuda_native_handle

    with pytest.raises(TypeError, match="Unknown type"):
        get_cuda_native_handle(driver.CUdeviceptr(1234))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert device_address(driver.CUdeviceptr(1234)) == 1234
    assert driver.CUdeviceptr(1234).getPtr() != 1234  # getPtr() is where the object stores it, not the address


def test_bindings_without_the_utils_module_fall_back_to_int(monkeypatch):
    """cuda-bindings 12.8 (what a Python 3.10 JetPack 6 may install) has no cuda.bindings.utils."""
    from cuda.bindings import runtime

    monkeypatch.setitem(sys.modules, "cuda.bindings.utils", None)
    assert native_handle(runtime.cudaStream_t(0x5000)) == 0x5000


def test_the_backend_hands_tensorrt_the_stream_as_an_int():
    """execute_async_v3 takes an int (pybind11 would otherwise call the deprecated int() on cudaStream_t)."""
    import ast
    from pathlib import Path

    import sdk.backends.tensorrt_gpu as backend

    tree = ast.parse(Path(backend.__file__).read_text())
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "attr", "") == "execute_async_v3"]
    assert calls and all(ast.unparse(c.args[0]) == "self._stream_handle" for c in calls)
