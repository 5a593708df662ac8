"""cuda-bindings is pinned to the device's CUDA major, never unbounded, and the offline wheels carry it.

Sources: cuda-bindings installation pages (nvidia.github.io/cuda-python): 12.9.x "Driver: Linux (525.60.13 or
later) ... the CUDA 12 minor-version compatibility baseline"; CUDA 13 packages need a 580.65+ driver (cuda.core
installation page, CUDA 13 column). JetPack 6 runs a CUDA 12.6 driver, so `cuda-bindings>=12.6` let pip pick 13.x,
which fails there. PyPI holds cuda-bindings 11.8.6-11.8.7, 12.8.0-12.9.x and 13.x (`pip index versions`, 2026-11).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement

import sdk
from sdk.probe import RUNTIME_MODULES
from tools.release.wheels import cuda_bindings_requirement, requirements_for

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(
    ("cuda", "allowed", "refused"),
    [
        ("12.6", ["12.8.0", "12.9.10"], ["13.0.0", "13.5.0", "11.8.7"]),  # JetPack 6 / 6.1 / 6.2
        ("12.2", ["12.9.10"], ["13.0.0"]),  # JetPack 6.0
        ("13.0", ["13.0.0", "13.5.0"], ["12.9.10", "14.0.0"]),  # JetPack 7
        ("11.4", ["11.8.7"], ["12.8.0"]),  # DRIVE OS 6.0
    ],
)
def test_cuda_bindings_follow_the_device_cuda_major(cuda, allowed, refused):
    requirement = Requirement(cuda_bindings_requirement(cuda))
    assert requirement.name == "cuda-bindings"
    assert all(requirement.specifier.contains(v) for v in allowed) and not any(requirement.specifier.contains(v) for v in refused)


def test_the_offline_wheels_carry_cuda_bindings_pinned_or_not_at_all():
    assert "cuda.bindings" in RUNTIME_MODULES
    assert requirements_for(["numpy", "cuda.bindings"], cuda="12.6") == ["cuda-bindings>=12,<13", "numpy>=1.21.5"]
    assert requirements_for(["numpy", "cuda.bindings"], cuda=None) == ["numpy>=1.21.5"]  # no CUDA: nothing to drive, never unbounded
    assert requirements_for(["numpy"]) == ["numpy>=1.21.5"]  # the call the deploy makes today


def test_no_extra_leaves_the_cuda_major_open():
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    pins = [(extra, Requirement(text)) for extra, texts in extras.items() for text in texts]
    cuda = [(extra, r) for extra, r in pins if r.name in ("cuda-bindings", "cuda-python")]
    assert {extra for extra, _ in cuda} >= {"cuda12", "cuda13", "tensorrt", "cuda", "test"}
    for extra, requirement in cuda:
        majors = {v.split(".")[0] for v in ("12.8.0", "12.9.10", "13.0.0", "13.5.0") if requirement.specifier.contains(v)}
        assert len(majors) == 1, f"[{extra}] {requirement} spans CUDA majors {sorted(majors)}"


def test_the_probe_reports_cuda_bindings_missing_where_no_cuda_package_exists():
    """`find_spec("cuda.bindings")` raises where `cuda` itself is missing; the probe must report, not crash."""
    probe = Path(sdk.__file__).parent / "probe.py"
    done = subprocess.run([sys.executable, "-I", "-S", str(probe)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "cuda.bindings" in json.loads(done.stdout)["missing_modules"]  # no site-packages: nothing is installed
