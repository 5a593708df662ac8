"""Which kernel image a device loads: a prebuilt cubin, the PTX, or NVRTC compilation of the source.

Rules (CUDA's compatibility model):
- a cubin for sm_XY runs on compute capability X.Z with Z >= Y, and needs a driver of at least the
  building toolkit's major version (minor-version compatibility covers the rest);
- PTX is JIT-compiled by the driver for any compute capability at or above its virtual
  architecture, but only by a driver at least as new as the toolkit that wrote it (PTX ISA version);
- otherwise the device's own NVRTC compiles the shipped source for its exact architecture.
A release carries only what its target can use (files_for_target), plus the source for NVRTC.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from sdk.errors import BackendError

SOURCES = ("src/preprocess.cu", "include/pp_math.cuh", "include/pp_params.h", "include/ssd_decode.cuh")


@dataclass(frozen=True)
class KernelManifest:
    """What plugins_cuda's build wrote to preprocess.json."""

    module: str
    toolkit: tuple[int, int]
    sass: tuple[int, ...]
    ptx: int | None

    @classmethod
    def parse(cls, data: dict) -> KernelManifest:
        major, minor = (int(part) for part in str(data["toolkit"]).split(".")[:2])
        return cls(str(data["module"]), (major, minor), tuple(int(a) for a in data.get("sass", ())), data.get("ptx"))

    @classmethod
    def load(cls, path: Path) -> KernelManifest:
        return cls.parse(json.loads(Path(path).read_text()))

    def cubin_name(self, arch: int) -> str:
        return f"{self.module}.sm_{arch}.cubin"

    def ptx_name(self) -> str:
        return f"{self.module}.compute_{self.ptx}.ptx"


@dataclass(frozen=True)
class ImageChoice:
    kind: str  # "cubin", "ptx" or "nvrtc"
    arch: int  # the architecture of the image (nvrtc: the one to compile for)
    file: str | None  # the file to load, relative to the kernels folder (None for nvrtc)
    reason: str


def arch_of(compute_capability: tuple[int, int]) -> int:
    major, minor = compute_capability
    return 10 * major + minor


def driver_version(encoded: int) -> tuple[int, int]:
    """cuDriverGetVersion's 1000 * major + 10 * minor, e.g. 12060 -> (12, 6)."""
    return encoded // 1000, (encoded % 1000) // 10


def choose_image(manifest: KernelManifest | None, compute_capability: tuple[int, int], driver: int, available: set[str] | None = None) -> ImageChoice:
    """The best image for this device; `available` (file names present) defaults to all the manifest lists."""
    arch = arch_of(compute_capability)
    major, minor = compute_capability
    if manifest is None:
        return ImageChoice("nvrtc", arch, None, "no prebuilt kernels shipped")
    shipped = {manifest.cubin_name(a) for a in manifest.sass} | ({manifest.ptx_name()} if manifest.ptx is not None else set())
    have = shipped if available is None else available
    drv = driver_version(driver)
    why = []
    if drv[0] < manifest.toolkit[0]:
        why.append(f"driver {drv[0]}.{drv[1]} is older than the CUDA {manifest.toolkit[0]}.x that built the cubins")
    else:
        # The highest SASS of the same major and not above the device's minor.
        fits = [a for a in manifest.sass if a // 10 == major and a % 10 <= minor and manifest.cubin_name(a) in have]
        if fits:
            best = max(fits)
            return ImageChoice("cubin", best, manifest.cubin_name(best), f"sm_{best} runs on compute capability {major}.{minor}")
        why.append(f"no cubin for compute capability {major}.{minor} (have sm_{manifest.sass})")
    if manifest.ptx is not None and manifest.ptx <= arch and manifest.ptx_name() in have:
        if drv >= manifest.toolkit:
            return ImageChoice("ptx", manifest.ptx, manifest.ptx_name(), "; ".join(why) + f"; the driver JIT-compiles compute_{manifest.ptx} PTX")
        why.append(f"the PTX needs a CUDA {manifest.toolkit[0]}.{manifest.toolkit[1]} driver")
    return ImageChoice("nvrtc", arch, None, "; ".join(why) + f"; compiling the source with NVRTC for sm_{arch}")


def check_nvrtc_for_driver(nvrtc: tuple[int, int], driver: int) -> None:
    """NVRTC's cubins need a driver of at least its major version (as nvcc's do): refuse before compiling."""
    drv = driver_version(driver)
    if nvrtc[0] > drv[0]:
        raise BackendError(
            f"NVRTC {nvrtc[0]}.{nvrtc[1]} builds kernels that the CUDA {drv[0]}.{drv[1]} driver cannot load",
            hint=f"install the NVRTC of CUDA {drv[0]} (JetPack's own, or pip's nvidia-cuda-nvrtc-cu{drv[0]}) or upgrade the driver",
        )


def files_for_target(manifest: KernelManifest, compute_capability: tuple[int, int] | None) -> list[str]:
    """What a release carries for a device: its cubin (if one fits), the PTX, the manifest, and the source."""
    files = [f"{manifest.module}.json", *SOURCES]
    if manifest.ptx is not None:
        files.append(manifest.ptx_name())
    if compute_capability is None:  # unknown device: every binary
        return files + [manifest.cubin_name(a) for a in manifest.sass]
    choice = choose_image(manifest, compute_capability, 1000 * manifest.toolkit[0] + 10 * manifest.toolkit[1])
    if choice.kind == "cubin":
        files.append(choice.file)
    return files


def load_image(folder: Path, choice: ImageChoice) -> bytes:
    """The bytes cuModuleLoadData takes: a cubin as is, PTX NUL-terminated."""
    if choice.file is None:
        raise BackendError(f"no prebuilt kernel image to load: {choice.reason}")
    data = (Path(folder) / choice.file).read_bytes()
    return data + b"\0" if choice.kind == "ptx" else data
