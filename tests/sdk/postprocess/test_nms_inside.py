"""nms_inside on the three box formats, with and without a count, normalised or in pixels: read as they are, mapped
to frame pixels; rows past the count or at or below the threshold are not detections; the SDK runs no NMS."""

from __future__ import annotations

import numpy as np
import pytest

from sdk.errors import ModelError
from sdk.geometry import ResizeGeometry
from sdk.postprocess import create_postprocessor
from sdk.spec.schema import Postprocess, Resize

# Two heavily overlapping boxes of one class: the SDK's NMS would drop one; the model kept both.
XYXY = np.array([[10, 20, 50, 60], [12, 22, 52, 62], [0, 0, 0, 0]], np.float32)


def formatted(fmt: str, normalized: bool) -> np.ndarray:
    boxes = XYXY.copy()
    if fmt == "yxyx":
        boxes = boxes[:, [1, 0, 3, 2]]
    elif fmt == "cxcywh":
        boxes = np.concatenate([(boxes[:, :2] + boxes[:, 2:]) / 2, boxes[:, 2:] - boxes[:, :2]], axis=1)
    if normalized:  # network input 100 wide, 80 high
        scale = np.array([80, 100, 80, 100] if fmt == "yxyx" else [100, 80, 100, 80], np.float32)
        boxes = boxes / scale
    return boxes[None]


@pytest.mark.parametrize("fmt", ["xyxy", "yxyx", "cxcywh"])
@pytest.mark.parametrize("normalized", [False, True])
@pytest.mark.parametrize("count", [None, 2])
def test_each_format_maps_to_frame_pixels_without_nms(fmt, normalized, count):
    outputs = {"b": formatted(fmt, normalized), "s": np.array([[0.6, 0.9, 0.0]], np.float32), "c": np.array([[1.0, 1.0, 0.0]], np.float32)}
    decoder = {"kind": "nms_inside", "boxes": "b", "scores": "s", "classes": "c", "box_format": fmt, "normalized": normalized, "class_offset": 1}
    if count is not None:
        outputs["n"] = np.array([count], np.int64)
        decoder["count"] = "n"
    spec = Postprocess.model_validate({"decoder": decoder, "classes": ["car"], "score_threshold": 0.5, "iou_threshold": 0.1})
    post = create_postprocessor(spec, outputs, (100, 80), {})
    geometry = ResizeGeometry.plan(200, 160, Resize(width=100, height=80, mode="stretch"))  # x2 both ways
    found = list(post(geometry))
    assert [d.label for d in found] == ["car", "car"] and [round(d.score, 3) for d in found] == [0.9, 0.6]  # best first
    assert found[0].box == pytest.approx((24, 44, 104, 124), abs=1e-3) and found[1].box == pytest.approx((20, 40, 100, 120), abs=1e-3)
    assert "the SDK's NMS is skipped" in post.describe()


def test_rows_past_the_count_are_not_read_and_mismatched_outputs_are_refused():
    outputs = {"b": formatted("xyxy", False), "s": np.array([[0.6, 0.9, 0.8]], np.float32), "c": np.zeros((1, 3), np.float32), "n": np.array([1])}
    spec = Postprocess.model_validate(
        {"decoder": {"kind": "nms_inside", "boxes": "b", "scores": "s", "classes": "c", "count": "n"}, "classes": ["car"]}
    )
    geometry = ResizeGeometry.plan(100, 80, Resize(width=100, height=80, mode="stretch"))
    assert [round(d.score, 2) for d in create_postprocessor(spec, outputs, (100, 80), {})(geometry)] == [0.6]
    with pytest.raises(ModelError, match="holds 2 values for 3 boxes"):
        create_postprocessor(spec, {**outputs, "s": np.zeros((1, 2), np.float32)}, (100, 80), {})
    with pytest.raises(ModelError, match="the model has no output 'n'"):
        create_postprocessor(spec, {k: v for k, v in outputs.items() if k != "n"}, (100, 80), {})
