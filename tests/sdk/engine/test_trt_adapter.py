"""The adapter never reaches TensorRT without a CUDA driver and device; here (no GPU) it says so clearly."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sdk.engine.cuda_check import require_cuda_device
from sdk.errors import BackendError

REPO = Path(__file__).resolve().parents[3]


def test_a_missing_driver_is_a_clear_error():
    with pytest.raises(BackendError, match=r"no CUDA driver on this machine \(libcuda-missing.so.1 not found\)"):
        require_cuda_device(BackendError, "libcuda-missing.so.1")


def test_the_builder_checks_the_driver_before_importing_tensorrt(tmp_path):
    """`tensorrt` is made to explode on import: the CUDA check must come first (deserializing without a driver crashes)."""
    script = f"""
import sys
sys.path.insert(0, {str(REPO)!r})
class Explodes:
    def __getattr__(self, name):
        raise SystemExit("tensorrt was touched")
sys.modules["tensorrt"] = Explodes()
import sdk.engine.cuda_check as check
check.DRIVER_LIBRARY = "libcuda-missing.so.1"
check.require_cuda_device.__defaults__ = ("libcuda-missing.so.1",)
from sdk.engine.build_plan import plan_build
from sdk.engine.platforms import TensorRTVersion
from sdk.engine.trt_adapter import TensorRTBuilder
from sdk.errors import EngineBuildError
plan = plan_build(TensorRTVersion.parse("10.3"), {{"x": (1, 3, 8, 8)}}, "fp16")
try:
    TensorRTBuilder(plan, "model.onnx")()
except EngineBuildError as exc:
    print("refused:", exc.message)
"""
    done = subprocess.run([sys.executable, "-I", "-c", script], capture_output=True, text=True, timeout=60)
    assert "refused: no CUDA driver on this machine" in done.stdout, done.stdout + done.stderr
    assert "tensorrt was touched" not in done.stdout + done.stderr

