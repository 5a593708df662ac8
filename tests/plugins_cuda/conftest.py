"""Builds of plugins_cuda, once per session: host reference (no CUDA), kernels (nvcc), aarch64 (cross),
and the host reference library called through ctypes with the plans sdk/gpu makes."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np
import pytest

from tests.conftest import shared_folder

from .helpers import HostReference

REPO = Path(__file__).resolve().parents[2]
PLUGINS = REPO / "plugins_cuda"
TOOLCHAINS = REPO / "cmake"


@dataclass(frozen=True)
class Build:
    folder: Path
    configure_log: str


def cmake_build(folder: Path, *options: str, env: dict | None = None) -> Build:
    cmake = shutil.which("cmake")  # resolved here: `env` may leave nvcc's folder (and what else is in it) off PATH
    if cmake is None:
        pytest.skip("cmake is not installed (apt-get install cmake)")
    configure = subprocess.run([cmake, "-S", str(PLUGINS), "-B", str(folder), *options], capture_output=True, text=True, env=env, timeout=120)
    assert configure.returncode == 0, configure.stdout + configure.stderr
    build = subprocess.run([cmake, "--build", str(folder), "-j", "2"], capture_output=True, text=True, env=env, timeout=300)
    assert build.returncode == 0, build.stdout + build.stderr
    (folder / "configure.log").write_text(configure.stdout)
    return Build(folder, configure.stdout)


def shared_build(tmp_path_factory, name: str, *options: str, env: dict | None = None) -> Build:
    """cmake_build once for the whole run (every xdist worker reads the same build: the tests only read it)."""
    if shutil.which("cmake") is None:
        pytest.skip("cmake is not installed (apt-get install cmake)")
    folder = shared_folder(tmp_path_factory, name, lambda where: cmake_build(where, *options, env=env))
    return Build(folder, (folder / "configure.log").read_text())


@pytest.fixture(scope="session")
def host_build(tmp_path_factory) -> Build:
    """The host reference, configured as on a machine without CUDA (nvcc off PATH and out of CMake's search)."""
    if shutil.which("g++") is None:
        pytest.skip("g++ is not installed (apt-get install g++)")
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep) if not (Path(p) / "nvcc").exists())
    env = {**os.environ, "PATH": path}
    env.pop("CUDACXX", None)
    return shared_build(
        tmp_path_factory,
        "pp-host",
        f"-DCMAKE_TOOLCHAIN_FILE={TOOLCHAINS / 'toolchain-x86_64-linux.cmake'}",
        "-DPLUGINS_CUDA_ROOT=/nonexistent",
        "-DCMAKE_FIND_USE_CMAKE_SYSTEM_PATH=OFF",  # CMake would otherwise look in /usr/local/bin
        env=env,
    )


@pytest.fixture(scope="session")
def nvcc() -> Path:
    """The nvcc the kernel tests build with: SDK_NVCC, else PATH's, else the nvidia-cuda-nvcc wheel's (the test extra)."""
    from tools.release.cuda_toolkit import find_nvcc

    found = find_nvcc()
    if found is None or shutil.which("g++") is None:
        pytest.skip("no nvcc: pip install -e '.[test]' (the nvidia-cuda-nvcc wheel), or a CUDA toolkit on PATH; and g++")
    return found


@pytest.fixture(scope="session")
def kernel_cache(tmp_path_factory) -> Path:
    """A host cache (the `cache` folder of `SDK_STATE_DIR`) whose kernels tools.release.kernels.build_kernels built, as a
    deploy builds them: once per run, shared by every test and worker (an nvcc build costs about 9 CPU-s). Empty where
    the host has no nvcc or cmake."""
    from tools.release.kernels import build_kernels

    return shared_folder(tmp_path_factory, "kernel-cache", build_kernels)


@pytest.fixture(scope="session")
def kernel_build(kernel_cache, nvcc) -> Build:
    """The CMake project with nvcc: a cubin and a ptxas report per architecture, the PTX, the manifest; the build a
    release carries (kernel_cache's), which every test and worker only reads."""
    from tools.release.kernels import build_kernels

    if shutil.which("cmake") is None:
        pytest.skip("cmake is not installed (apt-get install cmake)")
    folder = build_kernels(kernel_cache)
    assert folder is not None and (folder / "preprocess.json").is_file(), f"{kernel_cache}: no kernels were built with {nvcc}"
    return Build(folder, "")


@pytest.fixture(scope="session")
def aarch64_build(tmp_path_factory) -> Build:
    missing = [tool for tool in ("aarch64-linux-gnu-g++", "qemu-aarch64-static") if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"not installed: {', '.join(missing)} (apt-get install g++-aarch64-linux-gnu qemu-user-static)")
    return shared_build(
        tmp_path_factory,
        "pp-aarch64",
        f"-DCMAKE_TOOLCHAIN_FILE={TOOLCHAINS / 'toolchain-aarch64-linux-gnu.cmake'}",
        "-DPLUGINS_CUDA_KERNELS=OFF",
    )


@pytest.fixture(scope="session")
def reference(host_build) -> HostReference:
    return HostReference(host_build.folder / "libpp_reference.so")


@pytest.fixture(scope="session")
def real_frames(video_path) -> list[np.ndarray]:
    capture = cv2.VideoCapture(str(video_path))
    frames = []
    for index in range(120):
        ok, image = capture.read()
        assert ok
        if index in (0, 119):
            frames.append(image.copy())
    capture.release()
    return frames
