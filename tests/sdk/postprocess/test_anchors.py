"""Generated SSD anchors: MediaPipe's SsdAnchorsCalculator semantics, checked against values derived by hand and
against the anchor tensor a TF Object Detection API graph carries."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sdk.anchors import from_corners, generate
from sdk.spec.schema import SsdAnchorOptions

# MediaPipe's face_detection_short_range graph (BlazeFace, 128 x 128 input).
BLAZEFACE = dict(
    num_layers=4,
    min_scale=0.1484375,
    max_scale=0.75,
    input_size_width=128,
    input_size_height=128,
    anchor_offset_x=0.5,
    anchor_offset_y=0.5,
    strides=[8, 16, 16, 16],
    aspect_ratios=[1.0],
    fixed_anchor_size=True,
    interpolated_scale_aspect_ratio=1.0,
    reduce_boxes_in_lowest_layer=False,
)
# TF Object Detection API's ssd_anchor_generator for SSD(Lite)-MobileNetV2 at 300 x 300, as MediaPipe's options.
TF_SSD_300 = dict(
    num_layers=6,
    min_scale=0.2,
    max_scale=0.95,
    input_size_width=300,
    input_size_height=300,
    strides=[16, 32, 64, 128, 256, 512],
    aspect_ratios=[1.0, 2.0, 0.5, 3.0, 0.3333],
    reduce_boxes_in_lowest_layer=True,
)


def table(options: dict) -> np.ndarray:
    """[N, 4] cx, cy, w, h."""
    a = generate(SsdAnchorOptions(**options))
    return np.stack([a.cx, a.cy, a.w, a.h], axis=1)


def test_blazeface_short_range_has_mediapipes_896_anchors_at_hand_derived_places():
    a = table(BLAZEFACE)
    # Stride 8: ceil(128 / 8) = 16 cells a side, 2 anchors a cell (ratio 1.0, then the interpolated one): 512.
    # Strides 16, 16, 16 share one grid of 8 x 8 cells, 2 anchors per layer, 6 a cell: 384. 512 + 384 = 896.
    assert a.shape == (896, 4)
    assert SsdAnchorOptions(**BLAZEFACE).anchor_count == 896
    # fixed_anchor_size: every anchor is w = h = 1.
    assert np.all(a[:, 2:] == 1.0)
    # Anchors 0 and 1: cell (0, 0) of the 16-grid, centre (0 + 0.5) / 16 = 0.03125.
    assert a[0, :2].tolist() == a[1, :2].tolist() == [0.03125, 0.03125]
    # Anchor 2k is cell k in row-major order: anchor 34 = cell 17 = row 1, column 1 -> (1.5 / 16, 1.5 / 16) = 0.09375.
    assert a[34, :2].tolist() == [0.09375, 0.09375]
    # Anchor 40 = cell 20 = row 1, column 4 -> x (4.5 / 16) = 0.28125, y 0.09375: x runs fastest.
    assert a[40, :2].tolist() == [0.28125, 0.09375]
    # Anchor 511: cell 255 = row 15, column 15 -> 15.5 / 16 = 0.96875.
    assert a[511, :2].tolist() == [0.96875, 0.96875]
    # Anchors 512..517: cell (0, 0) of the 8-grid, centre 0.5 / 8 = 0.0625, six of them.
    assert np.all(a[512:518, :2] == 0.0625) and a[518, 0] == 1.5 / 8
    # Anchor 512 + 6 * 9 = 566: cell 9 = row 1, column 1 -> 1.5 / 8 = 0.1875; the last, 895: 7.5 / 8 = 0.9375.
    assert a[566, :2].tolist() == [0.1875, 0.1875]
    assert a[895, :2].tolist() == [0.9375, 0.9375]


def test_scales_and_the_interpolated_anchor_by_hand():
    a = table(BLAZEFACE | {"fixed_anchor_size": False})
    # scale_i = 0.1484375 + (0.75 - 0.1484375) * i / (4 - 1): 0.1484375, 0.3489583, 0.5494792, 0.75.
    s = [0.1484375 + 0.6015625 * i / 3 for i in range(4)]
    # Layer 0, ratio 1: w = h = s0; then the interpolated anchor: sqrt(s0 * s1) = sqrt(0.0517985) = 0.2275928.
    assert a[0, 2:] == pytest.approx([0.1484375, 0.1484375])
    assert a[1, 2:] == pytest.approx([math.sqrt(s[0] * s[1])] * 2) and a[1, 2] == pytest.approx(0.2275928, abs=1e-7)
    # The shared 16-stride grid: per cell s1, sqrt(s1 s2), s2, sqrt(s2 s3), s3, sqrt(s3 * 1) (the layer after the last is 1).
    expected = [s[1], math.sqrt(s[1] * s[2]), s[2], math.sqrt(s[2] * s[3]), s[3], math.sqrt(0.75)]
    assert a[512:518, 2] == pytest.approx(expected) and a[517, 2] == pytest.approx(0.8660254)
    assert np.array_equal(a[512:518], a[518:524] - [[0.125, 0, 0, 0]] * 6)  # the next cell: x + 1 / 8


def test_reduced_lowest_layer_ratios_and_offsets_by_hand():
    a = table(TF_SSD_300)
    # 19 x 19 x 3 (the reduced lowest layer) + (10^2 + 5^2 + 3^2 + 2^2 + 1^2) x 6 = 1083 + 834 = 1917.
    assert a.shape == (1917, 4) and SsdAnchorOptions(**TF_SSD_300).anchor_count == 1917
    r2 = math.sqrt(2.0)
    # Lowest layer, per cell: (0.1, ratio 1), (0.2, ratio 2): w = 0.2 sqrt 2, h = 0.2 / sqrt 2, (0.2, ratio 0.5): the transpose.
    assert a[0] == pytest.approx([0.5 / 19, 0.5 / 19, 0.1, 0.1])
    assert a[1, 2:] == pytest.approx([0.2 * r2, 0.2 / r2]) and a[2, 2:] == pytest.approx([0.2 / r2, 0.2 * r2])
    # Layer 1 (stride 32, ceil(300 / 32) = 10 cells) starts at 1083: scale 0.2 + 0.75 / 5 = 0.35, centre 0.5 / 10.
    assert a[1083] == pytest.approx([0.05, 0.05, 0.35, 0.35])
    assert a[1083 + 3, 2:] == pytest.approx([0.35 * math.sqrt(3.0), 0.35 / math.sqrt(3.0)])  # ratio 3
    assert a[1083 + 5, 2:] == pytest.approx([math.sqrt(0.35 * 0.5)] * 2)  # interpolated with the next scale, 0.5
    # The last anchor: stride 512, one cell at 0.5; interpolated sqrt(0.95 * 1).
    assert a[1916] == pytest.approx([0.5, 0.5, math.sqrt(0.95), math.sqrt(0.95)])
    offset = table(TF_SSD_300 | {"anchor_offset_x": 0.0, "anchor_offset_y": 1.0})
    assert offset[0, :2] == pytest.approx([0.0, 1 / 19]) and offset[1083, :2] == pytest.approx([0.0, 0.1])


def test_generated_anchors_equal_the_anchor_tensor_of_a_real_tf_graph(prepared_example):
    """The example detector's graph carries its 1917 anchors as a constant (written by TF, not by us):
    MediaPipe's options for the same generator reproduce them to float32 rounding."""
    tensor = prepared_example.load_tensors()["Postprocessor/ExpandDims:0"]
    theirs = from_corners(tensor, "yxyx")
    ours = generate(SsdAnchorOptions(**TF_SSD_300))
    for field in ("cx", "cy", "w", "h"):
        assert np.abs(getattr(ours, field) - getattr(theirs, field)).max() < 1e-6, field


@pytest.mark.parametrize("seed", range(40))
def test_the_count_checked_at_load_is_the_count_generated(seed):
    rng = np.random.default_rng(seed)
    layers = int(rng.integers(1, 6))
    strides = sorted(int(s) for s in rng.choice([4, 8, 16, 32, 64], layers))
    ratios = [float(r) for r in rng.uniform(0.3, 3, int(rng.integers(0, 4)))]
    interpolated = float(rng.choice([0.0, 1.0, 2.0])) if ratios else 1.0  # no ratio and no interpolated anchor is refused
    options = SsdAnchorOptions(
        num_layers=layers,
        min_scale=0.1,
        max_scale=0.9,
        input_size_width=int(rng.integers(16, 400)),
        input_size_height=int(rng.integers(16, 400)),
        strides=strides,
        aspect_ratios=ratios,
        interpolated_scale_aspect_ratio=interpolated,
        reduce_boxes_in_lowest_layer=bool(seed % 2),
        fixed_anchor_size=bool(seed % 5 == 0),
    )
    anchors = generate(options)
    assert len(anchors) == options.anchor_count
    assert np.all((anchors.cx > 0) & (anchors.cx < 1) & (anchors.cy > 0) & (anchors.cy < 1))
