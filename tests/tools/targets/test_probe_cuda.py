"""The probe reports the driver's CUDA version as `cuda` (null without a driver) and the toolkit's as `cuda_toolkit`.

The probe runs as the device runs it (`python3 probe.py`, standard library only), with a stand-in libcuda
built here and a stand-in nvidia-smi on PATH: no GPU needed."""

from __future__ import annotations

import ctypes.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import sdk

PROBE = Path(sdk.__file__).parent / "probe.py"
FAKE_LIBCUDA = "int cuDriverGetVersion(int *version) { *version = 12060; return 0; }\n"


def probe(env: dict) -> dict:
    done = subprocess.run([sys.executable, str(PROBE)], env=env, capture_output=True, text=True, timeout=60, check=True)
    return json.loads(done.stdout)


def base_env(tmp_path: Path) -> dict:
    """PATH without any nvidia-smi (a fake one goes first when a test adds it)."""
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if not (Path(p) / "nvidia-smi").exists())
    env = {**os.environ, "PATH": path}
    env.pop("LD_LIBRARY_PATH", None)
    return env


def test_the_driver_version_comes_from_libcuda_and_the_toolkit_is_separate(tmp_path):
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("needs a C compiler for the stand-in libcuda (apt-get install gcc)")
    lib = tmp_path / "lib"
    lib.mkdir()
    (tmp_path / "cuda.c").write_text(FAKE_LIBCUDA)
    subprocess.run([compiler, "-shared", "-fPIC", "-o", str(lib / "libcuda.so.1"), str(tmp_path / "cuda.c")], check=True)
    env = base_env(tmp_path)
    without = probe(env)
    with_driver = probe({**env, "LD_LIBRARY_PATH": str(lib)})
    assert with_driver["cuda"] == "12.6"  # 12060: the driver's cuDriverGetVersion
    assert with_driver["cuda_toolkit"] == without["cuda_toolkit"]  # the toolkit is reported on its own, unchanged
    if ctypes.util.find_library("cuda") is None:  # this machine has no CUDA driver of its own
        assert without["cuda"] is None, "no driver: no CUDA version, whatever toolkit is installed"


def test_without_libcuda_nvidia_smi_names_the_driver_version(tmp_path):
    if ctypes.util.find_library("cuda") is not None:
        pytest.skip("this machine has a CUDA driver: libcuda answers before nvidia-smi")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho '| NVIDIA-SMI 550.54   Driver Version: 550.54   CUDA Version: 12.4 |'\n")
    smi.chmod(0o755)
    env = base_env(tmp_path)
    assert probe({**env, "PATH": f"{bin_dir}{os.pathsep}{env['PATH']}"})["cuda"] == "12.4"
