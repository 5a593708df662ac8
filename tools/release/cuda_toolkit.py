"""Where the host's CUDA compiler is: a toolkit on PATH, else NVIDIA's nvcc wheel.

NVIDIA publishes the CUDA 13 compiler on PyPI: `nvidia-cuda-nvcc` 13.x (nvcc, ptxas, cudafe++, fatbinary, nvlink, with
`nvidia-nvvm` for cicc and `nvidia-cuda-runtime` / `nvidia-cuda-crt` for the headers) installs a working toolkit under
site-packages/nvidia/cu13/, which nvcc finds relative to itself (its nvcc.profile). The test extra brings it, so the
kernel builds and the ptxas resource checks run on a fresh clone without a system CUDA toolkit (decision 0417).

Order: `SDK_NVCC` (an explicit nvcc), then `nvcc` on PATH (the toolkit the user chose: a JetPack 6 host's CUDA 12.6
builds what a JetPack 6 driver loads), then the wheel's. ptxas: beside the nvcc found, else PATH, else the wheel's.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

WHEEL_FOLDERS = ("cu13",)  # nvidia/<folder>/bin of the nvcc wheels this SDK's test extra installs


def wheel_bin() -> Path | None:
    """site-packages/nvidia/cu13/bin of the nvcc wheel, where it is installed with an nvcc in it."""
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        return None
    for root in (spec.submodule_search_locations or []) if spec is not None else []:
        for folder in WHEEL_FOLDERS:
            candidate = Path(root) / folder / "bin"
            if (candidate / "nvcc").is_file() and os.access(candidate / "nvcc", os.X_OK):
                return candidate
    return None


def find_nvcc() -> Path | None:
    explicit = os.environ.get("SDK_NVCC")
    if explicit:
        return Path(explicit)
    on_path = shutil.which("nvcc")
    if on_path:
        return Path(on_path)
    folder = wheel_bin()
    return folder / "nvcc" if folder is not None else None


def find_ptxas() -> Path | None:
    nvcc = find_nvcc()
    if nvcc is not None and (nvcc.resolve().parent / "ptxas").is_file():
        return nvcc.resolve().parent / "ptxas"
    on_path = shutil.which("ptxas")
    if on_path:
        return Path(on_path)
    folder = wheel_bin()
    return folder / "ptxas" if folder is not None and (folder / "ptxas").is_file() else None


__all__ = ["find_nvcc", "find_ptxas", "wheel_bin"]
