"""The CUDA kernels a release carries: the target's cubin, the PTX, the manifest and the source (for NVRTC).

Built on the host by plugins_cuda's CMake project (cached by the hash of its sources and the nvcc
that builds them), chosen per target by the compute capability its probe reports, with the same
rules the device applies when it loads them (sdk/gpu/binaries.py). A host without nvcc ships the
source alone: the device compiles it with NVRTC.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import replace
from pathlib import Path

from sdk.gpu.binaries import SOURCES, KernelManifest, files_for_target
from tools.release.bundle import Bundle

KERNELS_DIR = "kernels"
REPO = Path(__file__).resolve().parents[2]
PLUGINS = REPO / "plugins_cuda"


def parse_compute_capability(text: str | None) -> tuple[int, int] | None:
    """The probe's "8.7" -> (8, 7); None or garbage -> None (no GPU known)."""
    try:
        major, minor = (int(part) for part in str(text).strip().split("."))
    except ValueError:
        return None
    return major, minor


def kernel_files(build_dir: Path | None, compute_capability: tuple[int, int] | None, plugins_dir: Path = PLUGINS) -> dict[str, Path]:
    """Release-relative path -> host file, for a device of this compute capability (None: unknown, all).
    Without a build (no nvcc on the host) only the source travels."""
    if build_dir is None:
        return {f"{KERNELS_DIR}/{name}": Path(plugins_dir) / name for name in SOURCES}
    manifest = KernelManifest.load(Path(build_dir) / "preprocess.json")
    files = {}
    for name in files_for_target(manifest, compute_capability):
        files[f"{KERNELS_DIR}/{name}"] = Path(plugins_dir) / name if name in SOURCES else Path(build_dir) / name
    missing = sorted(str(path) for path in files.values() if not path.is_file())
    if missing:
        raise FileNotFoundError(f"kernel files not built: {', '.join(missing)} (cmake --build the plugins_cuda project)")
    return files


def build_kernels(cache: Path) -> Path | None:
    """plugins_cuda built once per (sources, nvcc): the build folder, or None when the host has no nvcc (on PATH, or
    NVIDIA's nvcc wheel: tools/release/cuda_toolkit.py)."""
    from tools.release.cuda_toolkit import find_nvcc

    nvcc = find_nvcc()
    if nvcc is None or shutil.which("cmake") is None:
        return None
    digest = hashlib.sha256(subprocess.run([nvcc, "--version"], capture_output=True, check=True).stdout)
    for path in sorted([*PLUGINS.rglob("*"), *(REPO / "cmake").rglob("*")]):
        if path.is_file():
            digest.update(path.relative_to(REPO).as_posix().encode() + b"\0" + path.read_bytes())
    folder = Path(cache) / "kernels" / digest.hexdigest()[:16]
    if (folder / "preprocess.json").is_file():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder.parent, prefix=".tmp-") as temp:
        build = Path(temp) / "build"
        configure = ["cmake", "-S", str(PLUGINS), "-B", str(build), f"-DPLUGINS_NVCC={nvcc}"]
        for command in (configure, ["cmake", "--build", str(build), "-j", str(os.cpu_count() or 2)]):
            subprocess.run(command, capture_output=True, check=True)
        if not folder.exists():
            build.rename(folder)  # another deploy may have won the race: its build is as good
    return folder


def with_kernels(bundle: Bundle, files: dict[str, Path]) -> Bundle:
    return replace(bundle, files={**bundle.files, **files}, fingerprint={**bundle.fingerprint, "kernels": sorted(files)})
