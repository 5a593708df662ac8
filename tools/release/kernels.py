"""The CUDA kernels a release carries: the target's cubin, the PTX, the manifest and the source (for NVRTC).

Built by plugins_cuda's CMake project on the host; chosen per target by its compute capability
(from the probe), with the same rules the device applies when it loads them (sdk/gpu/binaries.py).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from sdk.gpu.binaries import SOURCES, KernelManifest, files_for_target
from tools.release.bundle import Bundle

KERNELS_DIR = "kernels"
PLUGINS = Path(__file__).resolve().parents[2] / "plugins_cuda"


def kernel_files(build_dir: Path, compute_capability: tuple[int, int] | None, plugins_dir: Path = PLUGINS) -> dict[str, Path]:
    """Release-relative path -> host file, for a device of this compute capability (None: unknown, all)."""
    manifest = KernelManifest.load(Path(build_dir) / "preprocess.json")
    files = {}
    for name in files_for_target(manifest, compute_capability):
        files[f"{KERNELS_DIR}/{name}"] = Path(plugins_dir) / name if name in SOURCES else Path(build_dir) / name
    missing = sorted(str(path) for path in files.values() if not path.is_file())
    if missing:
        raise FileNotFoundError(f"kernel files not built: {', '.join(missing)} (cmake --build the plugins_cuda project)")
    return files


def with_kernels(bundle: Bundle, files: dict[str, Path]) -> Bundle:
    return replace(bundle, files={**bundle.files, **files}, fingerprint={**bundle.fingerprint, "kernels": sorted(files)})
