"""The build plan with several cameras: TensorRT optimisation profiles (min/opt/max) and DLA's static batch, offline."""

from __future__ import annotations

import pytest

from sdk.engine.build_plan import BuildPlan, plan_build
from sdk.engine.platforms import TensorRTVersion
from sdk.errors import EngineBuildError
from sdk.spec.schema import DlaPlacement

TRT = TensorRTVersion.parse("10.3")
DLA = DlaPlacement(core=0)


def test_a_dynamic_batch_gets_a_profile_from_one_frame_to_one_per_camera():
    plan = plan_build(TRT, {"images": (0, 3, 300, 300)}, "fp16", cameras=4)
    (profile,) = plan.profiles
    assert (profile.minimum, profile.optimum, profile.maximum) == ((1, 3, 300, 300), (4, 3, 300, 300), (4, 3, 300, 300))
    assert "opt and max 4 (the camera count)" in plan.batch_note
    assert BuildPlan.from_dict(plan.as_dict()) == plan  # plan.json carries it to the device


def test_a_static_batch_of_the_camera_count_is_its_own_profile_and_said_so():
    plan = plan_build(TRT, {"images": (4, 3, 300, 300)}, "int8", cameras=4)
    assert plan.profiles[0].minimum == plan.profiles[0].maximum == (4, 3, 300, 300)
    assert plan.batch_note == "images: static batch 4 (one frame of each of the 4 cameras per call)"


def test_dla_takes_the_camera_count_as_a_static_batch_and_refuses_a_dynamic_one():
    plan = plan_build(TRT, {"images": (2, 3, 300, 300)}, "int8", DLA, dla_cores=2, cameras=2)
    assert plan.device == "DLA" and plan.batch_note.startswith("DLA needs a static batch: images: static batch 2")
    with pytest.raises(EngineBuildError, match="DLA engines need a static batch"):
        plan_build(TRT, {"images": (0, 3, 300, 300)}, "int8", DLA, dla_cores=2, cameras=2)


def test_one_camera_plans_as_before():
    one = plan_build(TRT, {"images": (1, 3, 300, 300)}, "int8")
    assert one.batch_note is None and one.profiles[0].optimum == (1, 3, 300, 300)
    # The note is a description: the engine cache key (the digest) rests on the shapes alone.
    assert one.digest() == plan_build(TRT, {"images": (1, 3, 300, 300)}, "int8", cameras=1).digest()
