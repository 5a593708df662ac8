"""The build plan for each TensorRT major: INT8 source, typing, device, limits, profiles, predicted precision."""

from __future__ import annotations

import pytest

from sdk.engine.build_plan import plan_build
from sdk.engine.platforms import TensorRTVersion
from sdk.errors import EngineBuildError
from sdk.spec.schema import DlaPlacement

SHAPES = {"images": (1, 3, 300, 300)}
PREDICTED = (("conv", "Convolution", "DLA"), ("softmax", "SoftMax", "DLA"), ("gather", "", "GPU"))


@pytest.mark.parametrize(
    ("tensorrt", "source", "strongly_typed", "fp16_fallback", "precisions"),
    [
        ("8.6.1", "calibration_cache", False, True, {"int8": 1, "fp16": 2}),
        ("10.3", "calibration_cache", False, True, {"int8": 1, "fp16": 2}),
        ("11.4", "qdq", True, False, {"int8": 1, "fp32": 2}),
    ],
)
def test_int8_source_and_typing_follow_the_tensorrt_major(tensorrt, source, strongly_typed, fp16_fallback, precisions):
    plan = plan_build(TensorRTVersion.parse(tensorrt), SHAPES, "int8", predicted=PREDICTED)
    assert (plan.int8_source, plan.strongly_typed, plan.fp16_fallback) == (source, strongly_typed, fp16_fallback)
    assert plan.precision_mix() == precisions
    assert plan.device == "GPU" and plan.dla_core is None and plan.dla_sram_bytes is None
    assert plan.device_mix() == {"GPU": 3}  # without a contract everything is built for the GPU
    assert plan.profiles[0].minimum == plan.profiles[0].optimum == plan.profiles[0].maximum == (1, 3, 300, 300)


def test_a_dla_plan_carries_core_fallback_and_sram():
    plan = plan_build(TensorRTVersion.parse("10.3"), SHAPES, "int8", DlaPlacement(core=1, gpu_fallback="forbidden"), dla_cores=2, predicted=PREDICTED)
    assert (plan.device, plan.dla_core, plan.gpu_fallback, plan.dla_sram_bytes) == ("DLA", 1, False, 1 << 20)
    assert plan.device_mix() == {"DLA": 2, "GPU": 1}


@pytest.mark.parametrize(
    ("tensorrt", "precision", "dla", "cores", "message"),
    [
        ("10.3", "fp32", DlaPlacement(), 2, "DLA runs FP16 or INT8 only"),
        ("10.3", "int8", DlaPlacement(core=1), 1, "model.dla.core 1"),
        ("10.3", "int8:MinMaxCalibration", DlaPlacement(), 2, "DLA takes INT8 only from EntropyCalibration2"),
        ("11.2", "int8", DlaPlacement(), 0, "offers 0 DLA cores"),
        ("11.4", "fp16", None, 0, "strongly typed"),
        ("10.3", "int4", None, 0, "unknown precision"),
    ],
)
def test_impossible_plans_are_refused(tensorrt, precision, dla, cores, message):
    precision, _, calibrator = precision.partition(":")
    with pytest.raises(EngineBuildError, match=message):
        plan_build(TensorRTVersion.parse(tensorrt), SHAPES, precision, dla, dla_cores=cores, calibrator=calibrator or "EntropyCalibration2")


def test_the_digest_follows_settings_not_predictions():
    version = TensorRTVersion.parse("10.3")
    base = plan_build(version, SHAPES, "int8", predicted=PREDICTED)
    assert base.digest() == plan_build(version, SHAPES, "int8", predicted=PREDICTED[:1]).digest()
    assert base.digest() == plan_build(TensorRTVersion.parse("10.3.1"), SHAPES, "int8").digest()  # the cache keys on the version itself
    for other in (
        plan_build(version, SHAPES, "fp16"),
        plan_build(version, {"images": (1, 3, 320, 320)}, "int8"),
        plan_build(version, SHAPES, "int8", workspace_bytes=1 << 28),
        plan_build(TensorRTVersion.parse("11.4"), SHAPES, "int8"),  # another INT8 route
    ):
        assert other.digest() != base.digest()
