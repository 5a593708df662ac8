"""The emulated CUDA device: `SDK_CUDA_EMULATION=host` runs the CUDA path's wiring on any machine.

`EmulatedCuda` has the interface of `sdk.gpu.driver.CudaModule` that the runtime uses (buffers, copies,
launches, events, one stream), with:
- device memory: host buffers of the same sizes, filled with a byte no kernel writes (0xCD) as
  uninitialised device memory reads; every copy and every pointer a launch reads or writes is checked
  against the allocation it points into, so a wrong size, offset or stride is an error, not a crash; a
  kernel may read only device memory, the engine's bindings, or pinned host memory mapped for the GPU
  (cuMemHostAlloc with CU_MEMHOSTALLOC_DEVICEMAP); host memory it was not given is refused;
- host memory: page-locked buffers (`pinned_buffer`) are known as such; any other array is pageable,
  which a copy inside a stream capture refuses (sdk/gpu/emulated_stream.py, rule 4);
- the engine's bindings: the ONNX Runtime backend's bound arrays, registered as device allocations;
- kernels: the CMake-built host reference (`SDK_CUDA_REFERENCE_LIB`, plugins_cuda's libpp_reference.so)
  through ctypes with the very parameter block a launch passes, else the numpy twins (sdk/gpu/reference.py);
  the launch geometry is checked to cover the work as on a GPU;
- the stream and stream capture: `EmulatedStream` (sdk/gpu/emulated_stream.py), asynchronous as on a GPU,
  with CUDA's capture and event rules and TensorRT's warm-up rule, each with its source.
Never chosen by `preprocess.device: auto`; the report says `emulated`. `SDK_CUDA_EMULATION_MEMORY=copy`
emulates a discrete GPU (the frame uploaded once per frame) instead of Jetson's mapped memory.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

import numpy as np

from sdk.errors import BackendError, ConfigError
from sdk.gpu import reference
from sdk.gpu.decode import DECODE_KERNELS, SsdParams, YoloParams
from sdk.gpu.emulated_stream import EmulatedEvent, EmulatedGraph, EmulatedStream
from sdk.gpu.emulation_switch import ENV, MEMORY_ENV, emulated_memory, emulation_requested
from sdk.gpu.params import DTYPES, FORMATS, LAYOUTS, PpParams
from sdk.gpu.plan import BLOCK_THREADS, KERNEL_NAMES

REFERENCE_ENV = "SDK_CUDA_REFERENCE_LIB"
UNINITIALISED = 0xCD


class EmulatedCuda(EmulatedStream):
    """Host buffers, an asynchronous stream with CUDA's capture rules, and host-reference kernels behind
    CudaModule's interface."""

    emulated = True

    def __init__(self, memory: str = "mapped", library: Path | str | None = None) -> None:
        if memory not in ("mapped", "copy"):
            raise ValueError(f"memory {memory!r}: mapped (Jetson, zero copy) or copy (discrete GPU)")
        super().__init__()
        self.memory = memory
        self.library_path = Path(library) if library else (Path(os.environ[REFERENCE_ENV]) if os.environ.get(REFERENCE_ENV) else None)
        self._lib = None
        # address -> (bytes, what, owner, kind): kind "device" (cuMemAlloc, a binding), "mapped" (pinned, GPU-visible)
        # or "pinned" (page-locked host memory the GPU does not address)
        self._allocations: dict[int, tuple[int, str, np.ndarray | None, str]] = {}
        self.launches: dict[str, int] = {}
        self.bytes_copied = {"to_device": 0, "to_host": 0}

    def open(self) -> EmulatedCuda:
        if self.library_path is not None:
            if not self.library_path.is_file():
                raise ConfigError(
                    f"{REFERENCE_ENV}={self.library_path}: no such file", hint="build plugins_cuda with CMake (libpp_reference.so) or unset it"
                )
            lib = ctypes.CDLL(str(self.library_path))
            lib.pp_reference.restype = ctypes.c_int
            lib.pp_reference.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int]
            lib.ssd_reference.argtypes = [ctypes.c_void_p]
            lib.yolo_reference.argtypes = [ctypes.c_void_p]
            self._lib = lib
        return self

    def close(self) -> None:
        EmulatedStream.close(self)
        self._allocations.clear()
        self._lib = None

    def __enter__(self) -> EmulatedCuda:
        return self.open()

    def __exit__(self, *exc) -> None:
        self.close()

    def describe(self) -> str:
        kernels = f"C++ host reference {self.library_path.name}" if self._lib is not None else "numpy twins of the kernels"
        return f"emulated on the host (SDK_CUDA_EMULATION=host): {kernels}, host buffers, {self.memory} input memory"

    # Memory ---------------------------------------------------------------------------------------
    def _allocate(self, nbytes: int, what: str, kind: str, call: str) -> tuple[np.ndarray, int]:
        self._refuse_in_capture(call, "allocating memory")  # rule 3
        array = np.full(max(1, nbytes), UNINITIALISED, np.uint8)
        address = array.ctypes.data
        self._allocations[address] = (nbytes, what, array, kind)
        return array[:nbytes], address

    def device_buffer(self, nbytes: int, what: str = "device buffer") -> int:
        return self._allocate(nbytes, what, "device", "cuMemAlloc")[1]

    def pinned_buffer(self, nbytes: int, mapped: bool, what: str = "pinned frame buffer") -> tuple[np.ndarray, int]:
        array, address = self._allocate(nbytes, what, "mapped" if mapped else "pinned", "cuMemHostAlloc")
        return array, (address if mapped else 0)

    def bind(self, array: np.ndarray, what: str) -> int:
        """An engine binding (the backend's own buffer) as device memory: its address."""
        if not array.flags.c_contiguous:
            raise BackendError(f"{what}: a binding must be one contiguous buffer")
        self._refuse_in_capture("cuMemAlloc", "allocating memory")
        self._allocations[array.ctypes.data] = (array.nbytes, what, None, "device")
        return array.ctypes.data

    def _find(self, address: int, nbytes: int, what: str) -> tuple[int, str, str] | None:
        """(start, name, kind) of the allocation holding [address, address + nbytes), None where none does."""
        for start, (size, name, _, kind) in self._allocations.items():
            if start <= address < start + max(size, 1):
                if address + nbytes > start + size:
                    raise BackendError(f"{what}: {nbytes} bytes at offset {address - start} run past the end of {name} ({size} bytes)")
                return start, name, kind
        return None

    def check(self, address: int, nbytes: int, what: str) -> None:
        """[address, address + nbytes) must lie inside one allocation the GPU addresses (device, binding, mapped)."""
        found = self._find(address, nbytes, what)
        if found is None:
            raise BackendError(f"{what}: address {address:#x} is in no device allocation")
        if found[2] == "pinned":
            raise BackendError(f"{what}: {found[1]} is page-locked host memory not mapped for the GPU (CUDA_ERROR_ILLEGAL_ADDRESS on a GPU)")

    def _host_side(self, host: np.ndarray, call: str) -> None:
        """Rule 4: inside a capture, the host side of a copy must be page-locked memory (cuMemHostAlloc)."""
        if self.capturing:
            found = self._find(host.ctypes.data, host.nbytes, call)
            if found is None or found[2] == "device":
                self._refuse_in_capture(call, "a copy to or from pageable host memory (the driver may synchronise to stage it)")

    def upload(self, device: int, host: np.ndarray) -> None:
        self._host_side(host, "cuMemcpyHtoDAsync")
        self.check(device, host.nbytes, "host-to-device copy")  # the driver checks the range when the copy is enqueued

        def run() -> None:
            ctypes.memmove(device, host.ctypes.data, host.nbytes)
            self.bytes_copied["to_device"] += host.nbytes

        self._stream("upload", run)

    def download(self, host: np.ndarray, device: int) -> None:
        self._host_side(host, "cuMemcpyDtoHAsync")
        self.check(device, host.nbytes, "device-to-host copy")

        def run() -> None:
            ctypes.memmove(host.ctypes.data, device, host.nbytes)
            self.bytes_copied["to_host"] += host.nbytes

        self._stream("download", run)

    def memset32(self, device: int, value: int, count: int) -> None:
        self.check(device, 4 * count, "memset")

        def run() -> None:
            reference.memory(device, 4 * count, np.uint32)[:] = value

        self._stream("memset", run)

    # Kernels --------------------------------------------------------------------------------------
    def function(self, name: str) -> str:
        if name not in KERNEL_NAMES and name not in DECODE_KERNELS:
            raise BackendError(f"the kernels module has no function {name!r}")
        return name

    def enqueue(self, function: str, grid: tuple[int, int, int], block: tuple[int, int, int], params: ctypes.Structure) -> None:
        threads = block[0] * block[1] * block[2]
        if threads > BLOCK_THREADS:
            raise BackendError(f"{function}: {threads} threads per block, more than the kernels' launch bounds ({BLOCK_THREADS})")
        captured = ctypes.pointer(type(params).from_buffer_copy(params))  # a launch copies its parameters, as cuLaunchKernel does
        kernel = self._decode if function in DECODE_KERNELS else self._preprocess
        kernel(function, grid, block, captured.contents, compute=False)  # geometry and pointers checked when launched

        def run() -> None:
            kernel(function, grid, block, captured.contents)
            self.launches[function] = self.launches.get(function, 0) + 1

        self._stream(function, run)

    def _preprocess(self, function: str, grid, block, p: PpParams, compute: bool = True) -> None:
        _, fmt, dtype, layout = function.split("_")
        if not isinstance(p, PpParams):
            raise BackendError(f"{function} takes a PpParams block, got {type(p).__name__}")
        if grid[0] * block[0] < p.out_w or grid[1] * block[1] < p.out_h:
            raise BackendError(f"{function}: grid {grid} x block {block} does not cover the {p.out_w}x{p.out_h} output")
        rows = p.crop_y + p.crop_h
        width = {"bgr8": 3, "rgb8": 3, "nv12": 1, "yuyv": 2}[fmt] * (p.crop_x + p.crop_w)
        self.check(p.src, (rows - 1) * p.src_pitch + width, f"{function}: source frame")
        if fmt == "nv12":
            self.check(p.src_uv, ((rows + 1) // 2 - 1) * p.uv_pitch + 2 * ((p.crop_x + p.crop_w + 1) // 2), f"{function}: chroma plane")
        size = {"f32": 4, "f16": 2, "u8": 1, "i8": 1}[dtype]
        self.check(p.dst, p.channels * p.out_w * p.out_h * size, f"{function}: output tensor")
        if not compute:
            return
        if self._lib is not None:
            if self._lib.pp_reference(ctypes.byref(p), FORMATS[fmt], DTYPES[dtype], LAYOUTS[layout]) != 0:
                raise BackendError(f"the host reference refused {function}")
        else:
            reference.preprocess(p, fmt, dtype, layout)

    def _decode(self, function: str, grid, block, p, compute: bool = True) -> None:
        expected = SsdParams if function == "ssd_decode" else YoloParams
        if not isinstance(p, expected):
            raise BackendError(f"{function} takes a {expected.__name__} block, got {type(p).__name__}")
        if grid[0] * block[0] < p.count:
            raise BackendError(f"{function}: grid {grid} x block {block} does not cover {p.count} rows")
        cap = p.capacity
        for address, nbytes, what in (
            (p.out_boxes, 16 * cap, "boxes"),
            (p.out_scores, 4 * cap, "scores"),
            (p.out_classes, 4 * cap, "classes"),
            (p.out_count, 4, "count"),
        ):
            self.check(address, nbytes, f"{function}: candidate {what}")
        if function == "ssd_decode":
            self.check(p.encodings, 16 * p.count, "ssd_decode: box encodings")
            self.check(p.logits, 4 * p.count * p.classes, "ssd_decode: class logits")
            self.check(p.anchors, 16 * p.count, "ssd_decode: anchors")
            if compute:
                (self._lib.ssd_reference(ctypes.byref(p)) if self._lib is not None else reference.ssd_decode(p))
        else:
            self.check(p.rows, 4 * p.count * (p.head + p.classes), "yolo_decode: output rows")
            if compute:
                (self._lib.yolo_reference(ctypes.byref(p)) if self._lib is not None else reference.yolo_decode(p))


__all__ = [
    "ENV",
    "MEMORY_ENV",
    "REFERENCE_ENV",
    "UNINITIALISED",
    "EmulatedCuda",
    "EmulatedEvent",
    "EmulatedGraph",
    "emulated_memory",
    "emulation_requested",
]
