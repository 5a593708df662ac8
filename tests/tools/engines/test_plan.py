"""The host gate: a pipeline whose contract the prediction breaks is refused before a plan exists; otherwise a DLA plan."""

from __future__ import annotations

import shutil

import pytest

from sdk.engine.platforms import TensorRTVersion
from sdk.errors import EngineBuildError
from tools.dla.report import TargetFacts
from tools.engines.plan import PlanEngineBuild

AGX_10 = TargetFacts("jetson-agx-orin", TensorRTVersion.parse("10.3"))


def pipeline(tmp_path, example_pipeline, detector_path, contract: str | None):
    (tmp_path / "assets").mkdir(parents=True)
    shutil.copyfile(detector_path, tmp_path / "assets" / "ssdlite_pedestrian.onnx")
    (tmp_path / "assets" / "vtest.avi").write_bytes(b"")
    text = example_pipeline.path.read_text()
    if contract:
        text = text.replace("  threads: 2\n", f"  threads: 2\n  dla: {contract}\n")
    (tmp_path / "p.yaml").write_text(text)
    return tmp_path / "p.yaml"


def test_a_contract_the_prediction_breaks_refuses_the_build(tmp_path, example_pipeline, detector_path):
    path = pipeline(tmp_path, example_pipeline, detector_path, "{core: 0, max_transitions: 0}")
    with pytest.raises(EngineBuildError, match=r"model.dla: placement contract violated .* transitions > max_transitions 0"):
        PlanEngineBuild(path, AGX_10, cache_root=tmp_path / "cache")()


def test_a_kept_contract_gives_a_dla_plan_with_the_predicted_mix(tmp_path, example_pipeline, detector_path):
    path = pipeline(tmp_path, example_pipeline, detector_path, "{core: 1, max_transitions: 8}")
    planned = PlanEngineBuild(path, AGX_10, cache_root=tmp_path / "cache")()
    plan, report = planned.plan, planned.report
    assert (plan.device, plan.dla_core, plan.int8_source, plan.strongly_typed) == ("DLA", 1, "calibration_cache", False)
    assert plan.calibrator == "EntropyCalibration2"  # the example calibrates with method: percentile (through the entropy calibrator)
    assert plan.device_mix() == {"DLA": report.dla_layers, "GPU": report.gpu_layers}
    assert sum(plan.precision_mix().values()) == len(report.layers)
    assert plan.profiles[0].tensor == "Preprocessor/sub:0" and plan.profiles[0].maximum == (1, 3, 300, 300)


def test_a_min_max_calibration_cannot_feed_dla(tmp_path, example_pipeline, detector_path):
    path = pipeline(tmp_path, example_pipeline, detector_path, "{core: 0}")
    path.write_text(path.read_text().replace("method: percentile", "method: minmax"))
    with pytest.raises(EngineBuildError, match="DLA takes INT8 only from EntropyCalibration2, the calibration is MinMaxCalibration"):
        PlanEngineBuild(path, AGX_10, cache_root=tmp_path / "cache")()


def test_no_contract_on_tensorrt_11_plans_a_strongly_typed_gpu_engine(tmp_path, example_pipeline, detector_path):
    path = pipeline(tmp_path, example_pipeline, detector_path, None)
    plan = PlanEngineBuild(path, TargetFacts("jetson-agx-orin", TensorRTVersion.parse("11.4")), cache_root=tmp_path / "cache")().plan
    assert (plan.device, plan.int8_source, plan.strongly_typed) == ("GPU", "qdq", True)
    assert set(plan.precision_mix()) <= {"int8", "fp32"}
