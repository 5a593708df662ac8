"""NVRTC: compile the shipped kernel source for the device's exact architecture (no GPU needed to compile).

The fallback when no prebuilt cubin or loadable PTX matches the device (sdk/gpu/binaries.py),
and how the tests prove the source compiles with NVRTC for sm_87 and sm_110.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from sdk.errors import BackendError, missing_dependency

INSTALL_HINT = (
    "pip install 'perception-deploy-sdk[cuda12]' on a CUDA 12 driver (JetPack 6), '[cuda13]' on CUDA 13 (JetPack 7); "
    "NVRTC comes with JetPack (or nvidia-cuda-nvrtc of the same major)"
)
# Every name of cuda.bindings.nvrtc used here; a test checks them against the installed package.
NVRTC_NAMES = (
    "nvrtcCreateProgram",
    "nvrtcCompileProgram",
    "nvrtcGetProgramLogSize",
    "nvrtcGetProgramLog",
    "nvrtcGetCUBINSize",
    "nvrtcGetCUBIN",
    "nvrtcDestroyProgram",
    "nvrtcResult",
    "nvrtcVersion",
)


@dataclass(frozen=True)
class Compiled:
    cubin: bytes
    log: str  # includes ptxas' resource report (-v)


def import_nvrtc():
    try:
        from cuda.bindings import nvrtc
    except ImportError as error:
        raise missing_dependency("cuda.bindings.nvrtc", INSTALL_HINT) from error
    return nvrtc


def compile_source(kernels_dir: Path, arch: int, extra_options: tuple[str, ...] = ()) -> Compiled:
    """Compile `src/preprocess.cu` (headers from `include/`) under kernels_dir to a cubin for sm_<arch>."""
    nvrtc = import_nvrtc()
    folder = Path(kernels_dir)
    source = (folder / "src" / "preprocess.cu").read_bytes()
    err, program = nvrtc.nvrtcCreateProgram(source, b"preprocess.cu", 0, [], [])
    _check(nvrtc, err, "nvrtcCreateProgram")
    try:
        options = [f"--gpu-architecture=sm_{arch}", f"-I{folder / 'include'}", "--ptxas-options=-v", *extra_options]
        options = [o.encode() for o in options]
        (compile_err,) = nvrtc.nvrtcCompileProgram(program, len(options), options)
        log = _log(nvrtc, program)
        if compile_err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise BackendError(f"NVRTC could not compile the preprocessing kernels for sm_{arch}:\n{log}")
        err, size = nvrtc.nvrtcGetCUBINSize(program)
        _check(nvrtc, err, "nvrtcGetCUBINSize")
        cubin = b" " * size
        (err,) = nvrtc.nvrtcGetCUBIN(program, cubin)
        _check(nvrtc, err, "nvrtcGetCUBIN")
        return Compiled(cubin, log)
    finally:
        nvrtc.nvrtcDestroyProgram(program)


def nvrtc_version() -> tuple[int, int]:
    nvrtc = import_nvrtc()
    err, major, minor = nvrtc.nvrtcVersion()
    _check(nvrtc, err, "nvrtcVersion")
    return int(major), int(minor)


def _log(nvrtc, program) -> str:
    err, size = nvrtc.nvrtcGetProgramLogSize(program)
    _check(nvrtc, err, "nvrtcGetProgramLogSize")
    buffer = b" " * size
    (err,) = nvrtc.nvrtcGetProgramLog(program, buffer)
    _check(nvrtc, err, "nvrtcGetProgramLog")
    return buffer.rstrip(b"\0 ").decode(errors="replace")


def _check(nvrtc, err, call: str) -> None:
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise BackendError(f"{call} failed: {err!r}")


@dataclass(frozen=True)
class KernelResources:
    registers: int
    spill_stores: int
    spill_loads: int
    stack_bytes: int


def resource_usage(ptxas_log: str) -> dict[str, KernelResources]:
    """Per kernel, from ptxas' -v report (nvcc -Xptxas -v or NVRTC --ptxas-options=-v)."""
    usage: dict[str, KernelResources] = {}
    name, frame = None, (0, 0, 0)
    for line in ptxas_log.splitlines():
        entry = re.search(r"(?:Compiling entry function|Function properties for) '?([A-Za-z_]\w*)'?", line)
        if entry:
            name = entry.group(1)
        stack = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if stack:
            frame = tuple(int(v) for v in stack.groups())
        registers = re.search(r"Used (\d+) registers", line)
        if registers and name:
            usage[name] = KernelResources(int(registers.group(1)), frame[1], frame[2], frame[0])
            frame = (0, 0, 0)
    return usage
