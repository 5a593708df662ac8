"""`sdk selftest --target T`: the release's hardware checks, run on the target (here: without a GPU)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tools.deploy import Deploy

from .engines.test_remote_build import orin_without_gpu  # noqa: F401  (an AGX Orin with TensorRT 10.3 but no GPU)

REPO = Path(__file__).resolve().parents[2]


def sdk(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "250"}
    return subprocess.run(
        [sys.executable, "-c", "from tools.cli import main; main()", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )


def test_on_a_machine_without_gpu_the_checks_skip_with_their_reasons(tiny_pipeline, tmp_path, state_dir):
    refused = sdk("selftest", "--target", "local")
    assert refused.returncode == 1 and "no release is current" in refused.stderr
    pipeline, _ = tiny_pipeline(frames=5)
    Deploy(pipeline.path, "local", frames=2, report_dir=tmp_path / "r")()
    done = sdk("selftest", "--target", "local")
    assert done.returncode == 4, done.stdout + done.stderr  # skipped for lack of hardware: proves nothing
    assert "cuda_driver" in done.stdout and "SKIP" in done.stdout and "no CUDA driver" in done.stdout
    assert "the release has no TensorRT engine" in done.stdout and "the release carries no CUDA kernels" in done.stdout


@pytest.mark.slow
def test_over_ssh_the_device_reports_its_own_tensorrt(orin_without_gpu, tiny_pipeline, ssh_target, tmp_path):  # noqa: F811
    pipeline, _ = tiny_pipeline(frames=5)
    Deploy(pipeline.path, ssh_target.name, frames=2, report_dir=tmp_path / "r")()
    done = sdk("selftest", "--target", ssh_target.name)
    assert done.returncode == 4, done.stdout + done.stderr
    assert "tensorrt 10.3.0.30" in done.stdout  # the device's stand-in TensorRT, found by the release's own Python
