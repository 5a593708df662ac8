"""The SASS architectures plugins_cuda builds follow the nvcc found, never a default that nvcc refuses.

Sources (the facts cmake/cuda_archs.cmake encodes):
- CUDA 12.8 release notes (docs.nvidia.com/cuda/archive/12.8.0/cuda-toolkit-release-notes): nvcc 12.8 adds
  SM_100, SM_101 and SM_120; CUDA 12.6 (JetPack 6.1/6.2) stops at sm_90.
- NVIDIA MathDx release notes for CUDA 13.0 (cuRANDDx 0.2.1, nvCOMPDx 0.1.1): "Thor SM renaming from sm_101 to
  sm_110 starting from CUDA 13.0; for CUDA 12.9 and older releases Thor stays labeled as sm_101".
- `nvcc --list-gpu-code` of nvcc 13.0.88 (this machine): sm_75 ... sm_121 with sm_110 and without sm_101.

Each case configures the project with a stand-in nvcc that answers `--version` and `--list-gpu-code` as that
release does; configuring writes preprocess.json, which names the architectures the build would compile.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from .conftest import PLUGINS, TOOLCHAINS

GPU_CODES = {
    "11.2": "50 52 53 60 61 62 70 72 75 80 86",
    "12.6": "50 52 53 60 61 62 70 72 75 80 86 87 89 90",
    "12.8": "50 52 53 60 61 62 70 72 75 80 86 87 89 90 100 101 120",
    "12.9": "50 52 53 60 61 62 70 72 75 80 86 87 89 90 100 101 103 120 121",
    "13.0": "75 80 86 87 88 89 90 100 110 103 120 121",
}


def fake_nvcc(folder: Path, release: str) -> Path:
    nvcc = folder / "nvcc"
    codes = "\n".join(f"sm_{code}" for code in GPU_CODES[release].split())
    nvcc.write_text(
        "#!/bin/sh\n"
        'case "$1" in\n'
        f"  --version) printf 'nvcc: NVIDIA (R) Cuda compiler driver\\nCuda compilation tools, release {release}, V{release}.0\\n' ;;\n"
        f"  --list-gpu-code) printf '{codes}\\n' ;;\n"
        "  *) exit 1 ;;\n"
        "esac\n"
    )
    nvcc.chmod(0o755)
    return nvcc


def configure(tmp_path: Path, release: str, *options: str) -> subprocess.CompletedProcess:
    if shutil.which("cmake") is None or shutil.which("g++") is None:
        pytest.skip("cmake and g++ are needed to configure plugins_cuda")
    nvcc = fake_nvcc(tmp_path, release)
    command = [
        "cmake", "-S", str(PLUGINS), "-B", str(tmp_path / "build"),
        f"-DCMAKE_TOOLCHAIN_FILE={TOOLCHAINS / 'toolchain-x86_64-linux.cmake'}", f"-DPLUGINS_NVCC={nvcc}", *options,
    ]  # fmt: skip
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    ("release", "sass"),
    [("12.6", [87]), ("12.8", [87, 101]), ("12.9", [87, 101]), ("13.0", [87, 110])],
)
def test_the_default_architectures_follow_the_nvcc_release(tmp_path, release, sass):
    done = configure(tmp_path, release)
    assert done.returncode == 0, done.stdout + done.stderr
    manifest = json.loads((tmp_path / "build" / "preprocess.json").read_text())
    assert manifest == {"module": "preprocess", "toolkit": release, "sass": sass, "ptx": 87}
    assert {str(arch) for arch in sass} <= set(GPU_CODES[release].split()), "a default this nvcc refuses"


def test_an_nvcc_without_sm_87_builds_the_host_reference_only(tmp_path):
    done = configure(tmp_path, "11.2")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "cannot build sm_87" in done.stdout
    assert not (tmp_path / "build" / "preprocess.json").exists()


@pytest.mark.parametrize(("release", "refused"), [("12.6", "sm_110"), ("12.8", "sm_110"), ("13.0", "sm_101")])
def test_architectures_given_by_hand_are_checked_against_the_nvcc(tmp_path, release, refused):
    done = configure(tmp_path, release, "-DPLUGINS_CUDA_ARCHS=87;101;110")
    assert done.returncode != 0
    assert f"nvcc {release} does not build" in done.stderr and refused in done.stderr
