"""The emulated CUDA device: `SDK_CUDA_EMULATION=host` runs the CUDA path's wiring on any machine.

`EmulatedCuda` has the interface of `sdk.gpu.driver.CudaModule` that the runtime uses (buffers, copies,
launches, events, one stream), with:
- device memory: host buffers of the same sizes, filled with a byte no kernel writes (0xCD) as
  uninitialised device memory reads; every copy and every pointer a launch reads or writes is checked
  against the allocation it points into, so a wrong size, offset or stride is an error, not a crash;
- the engine's bindings: the ONNX Runtime backend's bound arrays, registered as device allocations;
- kernels: the CMake-built host reference (`SDK_CUDA_REFERENCE_LIB`, plugins_cuda's libpp_reference.so)
  through ctypes with the very parameter block a launch passes, else the numpy twins (sdk/gpu/reference.py);
  the launch geometry is checked to cover the work as on a GPU;
- the stream: in order and synchronous; events record the host's monotonic clock when the stream
  reaches them, so the event-based stage timing code runs unchanged (the times are host times);
- stream capture (sdk/gpu/graph.py): while capturing, every operation is recorded instead of run, and a
  graph launch replays the recording in order; synchronising or reading an event while capturing is an
  error, as it is on a GPU.
Never chosen by `preprocess.device: auto`; the report says `emulated`.
"""

from __future__ import annotations

import ctypes
import os
import time
from pathlib import Path

import numpy as np

from sdk.errors import BackendError, ConfigError
from sdk.gpu import reference
from sdk.gpu.decode import DECODE_KERNELS, SsdParams, YoloParams
from sdk.gpu.params import DTYPES, FORMATS, LAYOUTS, PpParams
from sdk.gpu.plan import BLOCK_THREADS, KERNEL_NAMES

ENV = "SDK_CUDA_EMULATION"
REFERENCE_ENV = "SDK_CUDA_REFERENCE_LIB"
UNINITIALISED = 0xCD


def emulation_requested() -> bool:
    """Whether SDK_CUDA_EMULATION asks for the host emulation; any value but `host` (or unset) is an error."""
    value = os.environ.get(ENV, "")
    if value in ("", "0", "off"):
        return False
    if value != "host":
        raise ConfigError(f"{ENV}={value!r}: allowed: host (or unset)", hint=f"export {ENV}=host to run the CUDA path on host buffers")
    return True


class EmulatedEvent:
    __slots__ = ("t_ns",)

    def __init__(self) -> None:
        self.t_ns = 0


class EmulatedGraph:
    """A captured stream: its operations in order, (name, run) each."""

    def __init__(self, nodes: list[tuple[str, object]]) -> None:
        self.nodes = tuple(nodes)

    @property
    def names(self) -> list[str]:
        return [name for name, _ in self.nodes]


class EmulatedCuda:
    """Host buffers, a synchronous stream and host-reference kernels behind CudaModule's interface."""

    emulated = True

    def __init__(self, memory: str = "mapped", library: Path | str | None = None) -> None:
        if memory not in ("mapped", "copy"):
            raise ValueError(f"memory {memory!r}: mapped (Jetson, zero copy) or copy (discrete GPU)")
        self.memory = memory
        self.library_path = Path(library) if library else (Path(os.environ[REFERENCE_ENV]) if os.environ.get(REFERENCE_ENV) else None)
        self._lib = None
        self._allocations: dict[int, tuple[int, str, np.ndarray | None]] = {}  # address -> (bytes, what, owner)
        self.launches: dict[str, int] = {}
        self.bytes_copied = {"to_device": 0, "to_host": 0}
        self._capturing: list[tuple[str, object]] | None = None

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
    def _allocate(self, nbytes: int, what: str) -> tuple[np.ndarray, int]:
        array = np.full(max(1, nbytes), UNINITIALISED, np.uint8)
        address = array.ctypes.data
        self._allocations[address] = (nbytes, what, array)
        return array[:nbytes], address

    def device_buffer(self, nbytes: int, what: str = "device buffer") -> int:
        return self._allocate(nbytes, what)[1]

    def pinned_buffer(self, nbytes: int, mapped: bool, what: str = "pinned frame buffer") -> tuple[np.ndarray, int]:
        array, address = self._allocate(nbytes, what)
        return array, (address if mapped else 0)

    def bind(self, array: np.ndarray, what: str) -> int:
        """An engine binding (the backend's own buffer) as device memory: its address."""
        if not array.flags.c_contiguous:
            raise BackendError(f"{what}: a binding must be one contiguous buffer")
        self._allocations[array.ctypes.data] = (array.nbytes, what, None)
        return array.ctypes.data

    def check(self, address: int, nbytes: int, what: str) -> None:
        """[address, address + nbytes) must lie inside one allocation."""
        for start, (size, name, _) in self._allocations.items():
            if start <= address < start + max(size, 1):
                if address + nbytes > start + size:
                    raise BackendError(f"{what}: {nbytes} bytes at offset {address - start} run past the end of {name} ({size} bytes)")
                return
        raise BackendError(f"{what}: address {address:#x} is in no device allocation")

    def _stream(self, name: str, run) -> None:
        """Run an operation now, or record it while the stream is being captured."""
        if self._capturing is not None:
            self._capturing.append((name, run))
        else:
            run()

    def upload(self, device: int, host: np.ndarray) -> None:
        def run() -> None:
            self.check(device, host.nbytes, "host-to-device copy")
            ctypes.memmove(device, host.ctypes.data, host.nbytes)
            self.bytes_copied["to_device"] += host.nbytes

        self._stream("upload", run)

    def download(self, host: np.ndarray, device: int) -> None:
        def run() -> None:
            self.check(device, host.nbytes, "device-to-host copy")
            ctypes.memmove(host.ctypes.data, device, host.nbytes)
            self.bytes_copied["to_host"] += host.nbytes

        self._stream("download", run)

    def memset32(self, device: int, value: int, count: int) -> None:
        def run() -> None:
            self.check(device, 4 * count, "memset")
            reference.memory(device, 4 * count, np.uint32)[:] = value

        self._stream("memset", run)

    def node(self, name: str, run) -> None:
        """Other work on the stream: the engine's launch (the ONNX Runtime backend stands for enqueueV3)."""
        self._stream(name, run)

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

        def run() -> None:
            if function in DECODE_KERNELS:
                self._decode(function, grid, block, captured.contents)
            else:
                self._preprocess(function, grid, block, captured.contents)
            self.launches[function] = self.launches.get(function, 0) + 1

        self._stream(function, run)

    def _preprocess(self, function: str, grid, block, p: PpParams) -> None:
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
        if self._lib is not None:
            if self._lib.pp_reference(ctypes.byref(p), FORMATS[fmt], DTYPES[dtype], LAYOUTS[layout]) != 0:
                raise BackendError(f"the host reference refused {function}")
        else:
            reference.preprocess(p, fmt, dtype, layout)

    def _decode(self, function: str, grid, block, p) -> None:
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
            (self._lib.ssd_reference(ctypes.byref(p)) if self._lib is not None else reference.ssd_decode(p))
        else:
            self.check(p.rows, 4 * p.count * (p.head + p.classes), "yolo_decode: output rows")
            (self._lib.yolo_reference(ctypes.byref(p)) if self._lib is not None else reference.yolo_decode(p))

    # Stream and events ----------------------------------------------------------------------------
    def event(self) -> EmulatedEvent:
        return EmulatedEvent()

    def record(self, event: EmulatedEvent) -> None:
        def run() -> None:
            event.t_ns = time.monotonic_ns()  # the stream is synchronous: it reaches the event now

        self._stream("event", run)

    def _not_capturing(self, what: str) -> None:
        if self._capturing is not None:
            raise BackendError(f"{what} while the stream is being captured (CUDA: cudaErrorStreamCaptureUnsupported)")

    def event_ms(self, start: EmulatedEvent, stop: EmulatedEvent) -> float:
        self._not_capturing("reading an event")
        return (stop.t_ns - start.t_ns) / 1e6

    def synchronize(self) -> None:
        self._not_capturing("synchronising the stream")

    # Stream capture ---------------------------------------------------------------------------------
    def begin_capture(self) -> None:
        if self._capturing is not None:
            raise BackendError("the stream is already being captured")
        self._capturing = []

    def end_capture(self) -> EmulatedGraph:
        if self._capturing is None:
            raise BackendError("the stream is not being captured")
        graph, self._capturing = EmulatedGraph(self._capturing), None
        return graph

    def instantiate(self, graph: EmulatedGraph) -> EmulatedGraph:
        return graph

    def launch_graph(self, graph: EmulatedGraph) -> None:
        self._not_capturing("launching a graph")
        for _, run in graph.nodes:
            run()
