"""Engine cache: twins of one fingerprint hit the same entry; a miss names the key field that changed."""

from __future__ import annotations

import pytest

from sdk.engine.build_plan import plan_build
from sdk.engine.platforms import TensorRTVersion
from sdk.spec.schema import DlaPlacement
from tools.engines.cache import EngineCache, EngineCacheKey

ORIN = {
    "tensorrt": "10.3.0.30",
    "compute_capability": "8.7",
    "hostname": "orin-01",
    "dla_cores": 2,
    "module": {"part": "p3701-0005", "name": "Jetson AGX Orin 64GB", "platform": "jetson-agx-orin", "dla_cores": 2},
}


@pytest.fixture()
def files(tmp_path):
    (tmp_path / "model.onnx").write_bytes(b"prepared model")
    (tmp_path / "calib.cache").write_bytes(b"TRT-100300-EntropyCalibration2\n")
    (tmp_path / "engine").write_bytes(b"ftrt engine bytes")
    return tmp_path


def key(files, fingerprint=ORIN, platform="jetson-agx-orin", dla=None, shapes=None, model="model.onnx"):
    plan = plan_build(TensorRTVersion.parse(fingerprint["tensorrt"]), shapes or {"x": (1, 3, 300, 300)}, "int8", dla, dla_cores=2)
    return EngineCacheKey.for_build(files / model, files / "calib.cache", plan, fingerprint, platform)


def test_a_twin_of_the_same_fingerprint_hits(files):
    cache = EngineCache(files / "cache")
    first = key(files)
    assert not cache.lookup(first).hit and cache.lookup(first).reason == "miss: no engine cached yet"
    stored = cache.store(first, files / "engine")
    twin = key(files, {**ORIN, "hostname": "orin-02"})  # another vehicle, same fingerprint
    lookup = cache.lookup(twin)
    assert lookup.hit and lookup.engine == stored and stored.read_bytes() == b"ftrt engine bytes"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"fingerprint": {**ORIN, "tensorrt": "10.3.0.26"}}, "tensorrt 10.3.0.30 -> 10.3.0.26"),
        ({"fingerprint": {**ORIN, "compute_capability": "8.6"}}, "compute_capability 8.7 -> 8.6"),
        ({"platform": "jetson-orin-nx"}, "platform jetson-agx-orin -> jetson-orin-nx"),
        ({"dla": DlaPlacement(core=1)}, "dla_core gpu -> 1"),
        ({"fingerprint": {**ORIN, "module": {**ORIN["module"], "part": "p3701-0004"}}}, "module p3701-0005 -> p3701-0004"),  # 32GB
        ({"shapes": {"x": (1, 3, 320, 320)}}, "build_plan "),
        ({"model": "other.onnx"}, "prepared_model "),
    ],
)
def test_a_miss_says_which_key_field_changed(files, change, field):
    (files / "other.onnx").write_bytes(b"another prepared model")
    cache = EngineCache(files / "cache")
    cache.store(key(files), files / "engine")
    lookup = cache.lookup(key(files, **change))
    assert not lookup.hit
    assert field in lookup.reason and lookup.reason.count("->") == (2 if "dla" in change else 1), lookup.reason


def test_a_changed_int8_artifact_is_a_miss(files):
    cache = EngineCache(files / "cache")
    cache.store(key(files), files / "engine")
    (files / "calib.cache").write_bytes(b"TRT-100300-EntropyCalibration2\nx: 3c010204\n")
    assert "quantization " in cache.lookup(key(files)).reason
