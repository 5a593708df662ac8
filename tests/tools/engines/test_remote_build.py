"""Engine builds on the target over SSH (a real sshd), with the host's cache in front.

The simulated target is "an AGX Orin with TensorRT 10.3 but no GPU": its Python sees a stand-in
`tensorrt` package that only carries a version, so the probe reports TensorRT and the device-side
build runs for real up to the CUDA driver check, which fails here exactly as it would on a device
without a driver. A GPU target is needed for the build itself (marked tests elsewhere).
"""

from __future__ import annotations

import struct
import sys
from pathlib import Path

import pytest

from sdk.engine.build_plan import plan_build
from sdk.engine.platforms import TensorRTVersion
from sdk.errors import EngineBuildError
from sdk.spec.schema import DlaPlacement
from tools.engines.cache import EngineCache, EngineCacheKey
from tools.engines.remote_build import BuildEngineOnTarget
from tools.targets import resolve_target

DEVICE_TENSORRT = "10.3.0.30"


def tensorrt_standin_python(folder: Path) -> Path:
    """A device Python (a wrapper in `folder`) that sees a `tensorrt` package carrying only its version."""
    fake = folder / "device-site"
    (fake / "tensorrt").mkdir(parents=True)
    (fake / "tensorrt" / "__init__.py").write_text(f'__version__ = "{DEVICE_TENSORRT}"\n')
    wrapper = folder / "device-python"
    wrapper.write_text(f'#!/bin/sh\nPYTHONPATH="{fake}${{PYTHONPATH:+:$PYTHONPATH}}" exec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


@pytest.fixture()
def orin_without_gpu(ssh_target, tmp_path):
    ssh_target.write(platform="jetson-agx-orin", python=str(tensorrt_standin_python(tmp_path)))
    return resolve_target("sim")


def plan():
    return plan_build(TensorRTVersion.parse(DEVICE_TENSORRT), {"Preprocessor/sub:0": (1, 3, 300, 300)}, "fp16", DlaPlacement(core=0), dla_cores=2)


def crafted_engine(path, version):
    data = bytearray(64)
    struct.pack_into("<I", data, 0, 0x74727466)
    data[24:28] = bytes(version)
    path.write_bytes(bytes(data))
    return path


def key_for(prepared_example, tensorrt):
    fingerprint = {"tensorrt": tensorrt, "compute_capability": None}  # what the simulated device's probe reports
    return EngineCacheKey.for_build(prepared_example.model_path, None, plan(), fingerprint, "jetson-agx-orin")


def test_a_miss_builds_on_the_target_and_its_failure_comes_back_by_name(orin_without_gpu, prepared_example, ssh_target, tmp_path):
    cache_root = tmp_path / "cache"
    EngineCache(cache_root).store(key_for(prepared_example, "10.3.0.26"), crafted_engine(tmp_path / "old.engine", (10, 3, 0, 26)))
    events = []
    contract = DlaPlacement(max_transitions=6)
    build = BuildEngineOnTarget(orin_without_gpu, prepared_example.model_path, plan(), None, contract, cache_root, events.append)
    with pytest.raises(EngineBuildError, match=r"target sim: no CUDA driver on this machine"):
        build()
    assert events[0] == {"event": "cache", "reason": "miss: tensorrt 10.3.0.26 -> 10.3.0.30 (against the closest cached engine)"}
    assert events[1]["event"] == "start" and events[1]["device"] == "DLA" and events[-1]["kind"] == "EngineBuildError"
    assert not any((ssh_target.root / "builds").iterdir())  # the device's build folder is cleaned up


def test_a_twin_with_the_same_fingerprint_reuses_the_cached_engine(orin_without_gpu, prepared_example, ssh_target, tmp_path):
    cache_root = tmp_path / "cache"
    stored = EngineCache(cache_root).store(key_for(prepared_example, DEVICE_TENSORRT), crafted_engine(tmp_path / "e.engine", (10, 3, 0, 30)))
    result = BuildEngineOnTarget(orin_without_gpu, prepared_example.model_path, plan(), None, None, cache_root)()
    assert (result.built, result.cache_reason, result.engine) == (False, "hit", stored)
    assert not (ssh_target.root / "builds").exists()  # nothing was uploaded or built


def test_an_implicit_int8_plan_without_its_cache_is_refused_before_contacting_the_target(prepared_example, tmp_path):
    int8 = plan_build(TensorRTVersion.parse("10.3"), {"Preprocessor/sub:0": (1, 3, 300, 300)}, "int8")
    with pytest.raises(EngineBuildError, match="needs its calibration cache"):
        BuildEngineOnTarget(object(), prepared_example.model_path, int8, None, None, tmp_path / "cache")()
