"""A crop whose origin lies outside the frame is refused when the first frame shows the frame's size."""

from __future__ import annotations

import numpy as np
import pytest

from sdk.errors import ConfigError
from sdk.preprocess import CpuPreprocessor, ResizeGeometry
from sdk.spec.schema import Preprocess


def spec_with_crop(x: int, y: int) -> Preprocess:
    return Preprocess(resize={"width": 16, "height": 16}, crop={"x": x, "y": y, "width": 50, "height": 50})


@pytest.mark.parametrize(("x", "y", "key", "allowed"), [(768, 0, "x", "x from 0 to 767"), (10, 900, "y", "y from 0 to 575")])
def test_a_crop_starting_outside_the_frame_is_refused(x, y, key, allowed):
    with pytest.raises(ConfigError) as info:
        ResizeGeometry.plan(768, 576, spec_with_crop(x, y).resize, spec_with_crop(x, y).crop)
    message = info.value.message
    assert message.startswith(f"preprocess.crop.{key}: ") and "outside the 768x576 frame" in message and allowed in message
    assert "\n" not in message and "preprocess.crop" in info.value.hint


def test_the_preprocessor_refuses_it_on_the_first_frame():
    spec = spec_with_crop(900, 0)
    preprocess = CpuPreprocessor(spec, np.zeros(spec.tensor_shape, np.float32), sampler="separable")
    with pytest.raises(ConfigError, match=r"^preprocess\.crop\.x: 900 is outside the 768x576 frame"):
        preprocess(np.zeros((576, 768, 3), np.uint8))


def test_a_crop_inside_the_frame_that_runs_past_its_edge_is_still_clipped():
    geometry = ResizeGeometry.plan(768, 576, spec_with_crop(767, 575).resize, spec_with_crop(767, 575).crop)
    assert (geometry.crop_x, geometry.crop_y, geometry.crop_width, geometry.crop_height) == (767, 575, 1, 1)
