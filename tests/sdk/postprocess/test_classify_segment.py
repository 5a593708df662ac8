"""classify and segment decoders against plain numpy references: activations and top-k; argmax (NCHW, NHWC, ties),
one-channel thresholds, the mask through letterbox and crop (255 where the network did not look), pixel counts."""

from __future__ import annotations

import numpy as np
import pytest

from sdk.errors import ModelError
from sdk.geometry import ResizeGeometry
from sdk.postprocess import create_postprocessor
from sdk.postprocess.segment import UNSEEN
from sdk.spec.schema import Crop, Postprocess, Resize


def spec(decoder: dict, classes, **extra) -> Postprocess:
    return Postprocess.model_validate({"decoder": decoder, "classes": list(classes), **extra})


@pytest.mark.parametrize("activation", ["softmax", "sigmoid", "none"])
def test_top_k_with_each_activation(activation):
    logits = np.random.default_rng(1).normal(0, 2, (1, 50)).astype(np.float32)
    names = [f"k{i}" for i in range(50)]
    post = create_postprocessor(
        spec({"kind": "classify", "output": "o", "activation": activation, "top_k": 5}, names, score_threshold=0), {"o": logits}, (8, 8), {}
    )
    x = logits[0].astype(np.float64)
    probs = {"softmax": np.exp(x - x.max()) / np.exp(x - x.max()).sum(), "sigmoid": 1 / (1 + np.exp(-x)), "none": x}[activation]
    order = np.argsort(-probs)[:5]
    result = post(None)
    assert [label for label, _ in result.top()] == [names[i] for i in order]
    assert np.allclose([s for _, s in result.top()], probs[order], atol=1e-6)
    assert list(result) == [] and result.jsonl_fields(2)["classes"][0] == {"label": names[order[0]], "score": round(float(probs[order[0]]), 4)}


def test_classes_below_the_threshold_are_not_reported_and_a_wrong_class_count_is_refused():
    logits = np.array([[4.0, 0.0, -4.0]], np.float32)
    post = create_postprocessor(spec({"kind": "classify", "output": "o", "top_k": 3}, "abc", score_threshold=0.05), {"o": logits}, (8, 8), {})
    assert [label for label, _ in post(None).top()] == ["a"]
    with pytest.raises(ModelError, match="2 class name"):
        create_postprocessor(spec({"kind": "classify", "output": "o"}, "ab"), {"o": logits}, (8, 8), {})


def reference_mask(labels: np.ndarray, geometry: ResizeGeometry) -> np.ndarray:
    """Per source pixel: its centre scaled into the content names the network pixel; 255 outside the crop."""
    out = np.full((geometry.source_height, geometry.source_width), UNSEEN, np.uint8)
    xs = np.arange(geometry.crop_width)
    ys = np.arange(geometry.crop_height)
    cols = np.minimum(np.floor((xs + 0.5) * geometry.content_width / geometry.crop_width).astype(int), geometry.content_width - 1) + geometry.pad_x
    rows = np.minimum(np.floor((ys + 0.5) * geometry.content_height / geometry.crop_height).astype(int), geometry.content_height - 1) + geometry.pad_y
    out[geometry.crop_y : geometry.crop_y + geometry.crop_height, geometry.crop_x : geometry.crop_x + geometry.crop_width] = labels[
        rows[:, None], cols
    ]
    return out


@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("crop", [None, Crop(x=40, y=10, width=200, height=120)])
def test_argmax_mask_through_letterbox_and_crop(channels_last, crop):
    rng = np.random.default_rng(2)
    # blocky maps (objects, not noise), so that the two nearest-neighbour mappings agree except on block edges
    small = rng.normal(0, 1, (5, 8, 12)).astype(np.float32)
    maps = np.repeat(np.repeat(small, 8, axis=1), 8, axis=2)  # [5, 64, 96]
    maps[:, :4, :4] = 3.0  # a tie of every channel: the first wins, as argmax
    maps[1:3, 4:8, :4] = 4.0  # a tie of two
    raw = maps.transpose(1, 2, 0)[None].copy() if channels_last else maps[None].copy()
    names = [f"s{i}" for i in range(5)]
    post = create_postprocessor(spec({"kind": "segment", "output": "o", "channels_last": channels_last}, names), {"o": raw}, (96, 64), {})
    geometry = ResizeGeometry.plan(320, 150, Resize(width=96, height=64, mode="letterbox"), crop)
    result = post(geometry)
    expected = reference_mask(np.argmax(maps, axis=0).astype(np.uint8), geometry)
    assert result.mask.shape == (150, 320)
    assert np.count_nonzero(result.mask != expected) <= 0.01 * expected.size  # block edges may round either way
    seen = expected != UNSEEN
    assert result.pixels.sum() == seen.sum() and (result.mask == UNSEEN).sum() == (~seen).sum()
    assert result.jsonl_fields(2)["pixels"] == {names[i]: int(n) for i, n in enumerate(result.pixels) if n}


def test_one_channel_is_thresholded_after_its_activation():
    logits = np.array([[[[-2.0, -0.1], [0.1, 3.0]]]], np.float32)
    post = create_postprocessor(
        spec({"kind": "segment", "output": "o", "activation": "sigmoid", "threshold": 0.5}, ["bg", "fg"]), {"o": logits}, (2, 2), {}
    )
    result = post(ResizeGeometry.plan(2, 2, Resize(width=2, height=2, mode="stretch")))
    assert result.mask.tolist() == [[0, 0], [1, 1]] and result.pixels.tolist() == [2, 2]
    with pytest.raises(ModelError, match=r"1 class name\(s\) but 'o' \[1, 1, 2, 2\] has 1 channel") as info:
        create_postprocessor(spec({"kind": "segment", "output": "o"}, ["fg"]), {"o": logits}, (2, 2), {})
    assert "a one-channel output needs two: [background, foreground]" in info.value.hint
