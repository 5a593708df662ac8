"""A stand-in for TensorRT's runtime and cuda.bindings.driver, as strict as the real ones where the backend's wiring
is concerned: an engine declares -1 for a dynamic dimension; the execution context reports -1 until every dynamic
input's shape is set (NvInferRuntime.h, getTensorShape); setInputShape refuses a shape outside optimisation profile
0 or a fixed dimension changed ("Each dimension must agree with the network dimension unless the latter was -1");
enqueueV3 returns false while an input shape or a tensor address is missing. Memory is host memory at real
addresses, so the engine's "computation" (each output row = the mean of its batch slot's input, plus the column)
really goes through the copies and bindings the backend makes.

Every name used here is one the real packages have: the driver's are checked against the installed cuda-bindings, the
TensorRT ones are those the backend uses (checked against the TensorRT wheels, tests/sdk/engine/test_tensorrt_conformity.py).
"""

from __future__ import annotations

import ctypes
import enum
import struct
import types

import numpy as np

from sdk.engine.plan_header import PLAN_MAGIC, VERSION_OFFSET

VERSION = "10.3.0"


def plan_bytes(version: str = VERSION) -> bytes:
    header = bytearray(32)
    struct.pack_into("<I", header, 0, PLAN_MAGIC)
    header[VERSION_OFFSET : VERSION_OFFSET + 4] = bytes([*map(int, version.split(".")), 0][:4])
    return bytes(header)


class _Memory:
    """Allocations at real addresses (numpy buffers kept alive until freed)."""

    def __init__(self) -> None:
        self.blocks: dict[int, np.ndarray] = {}

    def allocate(self, nbytes: int) -> int:
        block = np.zeros(max(1, nbytes), np.uint8)
        self.blocks[block.ctypes.data] = block
        return block.ctypes.data

    def free(self, address: int) -> None:
        self.blocks.pop(int(address))


def driver_module():
    """cuda.bindings.driver as far as the backend uses it; copies run at once (the stand-in's stream is synchronous)."""
    memory = _Memory()
    ok = 0
    calls: list[str] = []
    module = types.ModuleType("cuda.bindings.driver")

    class CUresult(enum.IntEnum):
        CUDA_SUCCESS = 0

    def returning(name, value=None):
        def call(*_args):
            calls.append(name)
            return (CUresult.CUDA_SUCCESS,) if value is None else (CUresult.CUDA_SUCCESS, value)

        return call

    def memcpy(name):
        def call(dst, src, nbytes, *_stream):
            calls.append(name)
            ctypes.memmove(int(dst), int(src), nbytes)
            return (CUresult.CUDA_SUCCESS,)

        return call

    module.CUresult = CUresult
    module.CUstream_flags = enum.Enum("CUstream_flags", {"CU_STREAM_DEFAULT": 0, "CU_STREAM_NON_BLOCKING": 1})
    module.CUevent_flags = enum.Enum("CUevent_flags", {"CU_EVENT_DEFAULT": 0})
    module.CUstreamCaptureMode = enum.Enum("CUstreamCaptureMode", {"CU_STREAM_CAPTURE_MODE_THREAD_LOCAL": 1})
    for name, value in (("cuInit", None), ("cuDeviceGet", 0), ("cuDevicePrimaryCtxRetain", 0x11), ("cuCtxSetCurrent", None),
                        ("cuDevicePrimaryCtxRelease", None), ("cuStreamCreate", 0x5000), ("cuStreamSynchronize", None),
                        ("cuStreamDestroy", None), ("cuEventCreate", 0x6000), ("cuEventRecord", None), ("cuEventElapsedTime", 0.25),
                        ("cuEventDestroy", None)):  # fmt: skip
        setattr(module, name, returning(name, value))
    module.cuMemAlloc = lambda nbytes: (calls.append("cuMemAlloc"), (ok, memory.allocate(nbytes)))[1]
    module.cuMemHostAlloc = lambda nbytes, flags: (calls.append("cuMemHostAlloc"), (ok, memory.allocate(nbytes)))[1]
    module.cuMemFree = lambda address: (memory.free(address), (ok,))[1]
    module.cuMemFreeHost = module.cuMemFree
    module.cuMemcpyHtoDAsync, module.cuMemcpyDtoHAsync, module.cuMemcpyHtoD = (
        memcpy(n) for n in ("cuMemcpyHtoDAsync", "cuMemcpyDtoHAsync", "cuMemcpyHtoD")
    )
    module.cuGetErrorName = lambda error: (ok, b"CUDA_ERROR_STANDIN")
    # Stream capture as far as a backend asks about it.
    module.CUstreamCaptureStatus = enum.Enum("CUstreamCaptureStatus", {"CU_STREAM_CAPTURE_STATUS_NONE": 0, "CU_STREAM_CAPTURE_STATUS_ACTIVE": 1})
    module.capturing = False
    module.cuStreamIsCapturing = lambda stream: (
        ok,
        module.CUstreamCaptureStatus["CU_STREAM_CAPTURE_STATUS_ACTIVE" if module.capturing else "CU_STREAM_CAPTURE_STATUS_NONE"],
    )
    module.calls, module.memory = calls, memory
    return module


class DataType(enum.Enum):
    FLOAT = 0


class TensorIOMode(enum.Enum):
    NONE = 0
    INPUT = 1
    OUTPUT = 2


class Engine:
    """One image input (dynamic batch where the plan says so) and one output `scores` [batch, columns]."""

    def __init__(self, profile, columns: int = 4) -> None:
        self.profile = profile  # sdk.engine.build_plan.Profile
        dynamic = profile.minimum[0] != profile.maximum[0]
        self.shapes = {
            profile.tensor: ((-1 if dynamic else profile.minimum[0]), *profile.minimum[1:]),
            "scores": ((-1 if dynamic else profile.minimum[0]), columns),
        }
        self.modes = {profile.tensor: TensorIOMode.INPUT, "scores": TensorIOMode.OUTPUT}
        self.num_io_tensors = 2

    def get_tensor_name(self, index: int) -> str:
        return list(self.shapes)[index]

    def get_tensor_shape(self, name: str):
        return self.shapes[name]

    def get_tensor_mode(self, name: str) -> TensorIOMode:
        return self.modes.get(name, TensorIOMode.NONE)

    def get_tensor_dtype(self, name: str) -> DataType:
        return DataType.FLOAT

    def get_tensor_profile_shape(self, name: str, index: int):
        assert index == 0 and self.modes[name] == TensorIOMode.INPUT
        return (self.profile.minimum, self.profile.optimum, self.profile.maximum)

    def create_execution_context(self) -> Context:
        return Context(self)


class Context:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.set_shapes: dict[str, tuple] = {}
        self.addresses: dict[str, int] = {}
        self.enqueued = 0

    def set_input_shape(self, name: str, shape) -> bool:
        declared = self.engine.shapes.get(name)
        if self.engine.modes.get(name) != TensorIOMode.INPUT or len(shape) != len(declared):
            return False
        if any(d != s for d, s in zip(declared, shape, strict=True) if d >= 0):
            return False
        profile = self.engine.profile
        if not all(lo <= s <= hi for lo, s, hi in zip(profile.minimum, shape, profile.maximum, strict=True)):
            return False
        self.set_shapes[name] = tuple(shape)
        return True

    def _batch(self) -> int | None:
        image = self.engine.profile.tensor
        shape = self.set_shapes.get(image, self.engine.shapes[image])
        return shape[0] if shape[0] >= 0 else None

    def get_tensor_shape(self, name: str):
        if name in self.set_shapes:
            return self.set_shapes[name]
        batch = self._batch()
        declared = self.engine.shapes[name]
        return declared if declared[0] >= 0 or batch is None else (batch, *declared[1:])

    def set_tensor_address(self, name: str, address: int) -> bool:
        self.addresses[name] = int(address)
        return True

    def execute_async_v3(self, stream: int) -> bool:
        if not isinstance(stream, int):
            return False  # the binding takes the stream as an int
        if self._batch() is None or set(self.addresses) != set(self.engine.shapes):
            return False  # TensorRT: input shapes or tensor addresses not specified
        image, batch = self.engine.profile.tensor, self._batch()
        shape, (_, columns) = self.get_tensor_shape(image), self.engine.shapes["scores"]
        pixels = int(np.prod(shape[1:]))
        source = np.ctypeslib.as_array((ctypes.c_float * (batch * pixels)).from_address(self.addresses[image])).reshape(batch, pixels)
        scores = np.ctypeslib.as_array((ctypes.c_float * (batch * columns)).from_address(self.addresses["scores"])).reshape(batch, columns)
        scores[:] = source.mean(axis=1, keepdims=True) + np.arange(columns, dtype=np.float32)
        self.enqueued += 1
        return True


def tensorrt_module(engine: Engine, version: str = VERSION):
    module = types.ModuleType("tensorrt")
    module.__version__ = version
    module.DataType, module.TensorIOMode = DataType, TensorIOMode
    module.nptype = lambda dtype: np.float32
    module.Logger = type("Logger", (), {"WARNING": 2, "__init__": lambda self, severity=2: None})

    class Runtime:
        def __init__(self, logger) -> None:
            self.DLA_core = -1

        def deserialize_cuda_engine(self, data: bytes) -> Engine:
            return engine

    module.Runtime = Runtime
    return module
