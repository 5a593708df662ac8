"""`sdk selftest --target T`: the release's hardware checks, run on the target (without a GPU, and with one where the machine has it)."""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tools.deploy import Deploy

from .engines.test_remote_build import orin_without_gpu  # noqa: F401  (an AGX Orin with TensorRT 10.3 but no GPU)

REPO = Path(__file__).resolve().parents[2]


def has_cuda_driver() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


def sdk(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "250"}
    return subprocess.run(
        [sys.executable, "-c", "from tools.cli import main; main()", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )


def test_on_a_machine_without_gpu_the_checks_skip_with_their_reasons(tiny_pipeline, tmp_path, state_dir, monkeypatch):
    """The selftest runs in a child process that finds this machine's driver itself: where one loads, the GPU test below
    covers the machine instead. The probe (in this process) is told there is no GPU, so an `nvidia-smi` on PATH
    without a loadable driver ships no kernels either."""
    if has_cuda_driver():
        pytest.skip("this machine has a CUDA driver (libcuda.so.1): test_on_a_gpu_machine_the_cuda_checks_run covers it")
    from sdk import probe

    monkeypatch.setattr(probe, "_compute_capability", lambda soc: None)
    refused = sdk("selftest", "--target", "local")
    assert refused.returncode == 1 and "no release is current" in refused.stderr
    pipeline, _ = tiny_pipeline(frames=5)
    Deploy(pipeline.path, "local", frames=2, report_dir=tmp_path / "r")()
    done = sdk("selftest", "--target", "local")
    assert done.returncode == 4, done.stdout + done.stderr  # skipped for lack of hardware: proves nothing
    assert "cuda_driver" in done.stdout and "SKIP" in done.stdout and "no CUDA driver" in done.stdout
    assert "the release has no TensorRT engine" in done.stdout and "the release carries no CUDA kernels" in done.stdout
    assert "cuda_pipeline_matches_cpu" in done.stdout


@pytest.mark.slow
def test_the_cuda_pipeline_check_on_the_emulated_device(state_dir, tmp_path, monkeypatch):
    """The selftest's short CUDA-path run against the CPU path, everything but the GPU: the example's release,
    the CUDA path on the emulated device (which the check names in its detail)."""
    from sdk.selftest import PASS, cuda_pipeline_matches_cpu

    monkeypatch.delenv("SDK_CUDA_EMULATION", raising=False)
    Deploy(REPO / "pipelines" / "pedestrian.yaml", "local", frames=2, report_dir=tmp_path / "r")()
    release = (state_dir / "targets" / "local" / "current").resolve()
    status, detail = cuda_pipeline_matches_cpu(release, gpu=False, frames=12, emulate=True)
    assert status == PASS, detail
    assert detail.startswith("EMULATED on the host, not a GPU: 12 frames: 100.0% of") and "decode on cuda" in detail
    assert "SDK_CUDA_EMULATION" not in os.environ  # restored


@pytest.mark.slow
def test_over_ssh_the_device_reports_its_own_tensorrt(orin_without_gpu, tiny_pipeline, ssh_target, tmp_path):  # noqa: F811
    pipeline, _ = tiny_pipeline(frames=5)
    Deploy(pipeline.path, ssh_target.name, frames=2, report_dir=tmp_path / "r")()
    done = sdk("selftest", "--target", ssh_target.name)
    assert done.returncode == 4, done.stdout + done.stderr
    assert "tensorrt 10.3.0.30" in done.stdout  # the device's stand-in TensorRT, found by the release's own Python


@pytest.mark.gpu
def test_on_a_gpu_machine_the_cuda_checks_run(tiny_pipeline, tmp_path, state_dir):
    """Where a driver and a device exist: the local release carries the kernels for the probed compute capability (a
    cubin, the PTX or the source for NVRTC) and the selftest runs the CUDA preprocessing kernel against the CPU path."""
    from sdk.engine.cuda_check import require_cuda_device
    from sdk.errors import SdkError
    from tools.remote import selftest
    from tools.targets import resolve_target

    try:
        require_cuda_device(SdkError)
    except SdkError as exc:
        pytest.skip(f"needs a CUDA device: {exc.message}")
    pytest.importorskip("cuda.bindings.driver", reason="cuda-bindings is not installed")
    if shutil.which("nvcc") is None:  # no prebuilt kernels: the release carries the source and the device compiles it
        pytest.importorskip("cuda.bindings.nvrtc", reason="neither nvcc nor NVRTC")
    if shutil.which("nvidia-smi") is None:
        pytest.skip("the probe reads a discrete GPU's compute capability with nvidia-smi, which is not on PATH")
    pipeline, _ = tiny_pipeline(frames=5)
    Deploy(pipeline.path, "local", frames=2, report_dir=tmp_path / "r")()
    checks = {check["name"]: check for check in selftest(resolve_target("local"))["checks"]}
    assert checks["cuda_driver"]["status"] == "PASS", checks
    assert checks["cuda_preprocess_matches_cpu"]["status"] == "PASS", checks
    assert "of an 8-bit step" in checks["cuda_preprocess_matches_cpu"]["detail"]
    assert checks["engine_runs"]["status"] in ("N/A", "PASS"), checks  # an engine only where TensorRT builds one
    # The short CUDA-path pipeline (kernel into the engine's binding, decode on the device) needs the engine too.
    assert checks["cuda_pipeline_matches_cpu"]["status"] == ("PASS" if checks["engine_runs"]["status"] == "PASS" else "N/A"), checks
