"""SSD and YOLO decoding and NMS, on crafted tensors with known answers."""

from __future__ import annotations

import numpy as np
import pytest

from sdk.errors import ModelError
from sdk.postprocess import create_postprocessor
from sdk.postprocess.nms import batched_nms
from sdk.preprocess import ResizeGeometry
from sdk.spec.schema import Postprocess, Resize


def reference_nms(boxes, scores, classes, iou):
    """Textbook greedy per-class NMS, written independently of OpenCV."""
    order = list(np.argsort(-scores, kind="stable"))
    keep = []
    while order:
        i = order.pop(0)
        keep.append(i)
        rest = []
        for j in order:
            if classes[j] == classes[i]:
                x1, y1 = max(boxes[i, 0], boxes[j, 0]), max(boxes[i, 1], boxes[j, 1])
                x2, y2 = min(boxes[i, 2], boxes[j, 2]), min(boxes[i, 3], boxes[j, 3])
                inter = max(0, x2 - x1) * max(0, y2 - y1)
                union = np.prod(boxes[i, 2:] - boxes[i, :2]) + np.prod(boxes[j, 2:] - boxes[j, :2]) - inter
                if inter / union > iou:
                    continue
            rest.append(j)
        order = rest
    return keep


def test_nms_matches_a_textbook_greedy_reference():
    rng = np.random.default_rng(3)
    for _ in range(20):
        n = 60
        xy = rng.uniform(0, 200, (n, 2))
        wh = rng.uniform(5, 60, (n, 2))
        boxes = np.hstack([xy, xy + wh]).astype(np.float32)
        scores = rng.uniform(0.1, 1, n).astype(np.float32)
        classes = rng.integers(0, 3, n)
        ours = batched_nms(boxes, scores, classes, 0.5, 1000)
        assert sorted(ours.tolist()) == sorted(reference_nms(boxes, scores, classes, 0.5))
        assert list(ours[:5]) == sorted(ours, key=lambda i: -scores[i])[:5]
    assert len(batched_nms(boxes, scores, classes, 0.5, 7)) == 7
    assert len(batched_nms(np.zeros((0, 4), np.float32), np.zeros(0, np.float32), np.zeros(0), 0.5, 10)) == 0


def identity_geometry(width=300, height=300):
    return ResizeGeometry.plan(width, height, Resize(width=width, height=height))


def ssd_spec(**overrides):
    decoder = {"kind": "ssd", "box_encodings": "boxes", "class_logits": "logits", "anchors": "anchors"} | overrides
    return Postprocess(decoder=decoder, classes=["person"], score_threshold=0.5, iou_threshold=0.6)


def test_ssd_decodes_tf_box_coder_and_maps_to_source_pixels():
    anchors = np.array([[0.1, 0.2, 0.3, 0.4], [0.5, 0.5, 0.9, 0.7], [0.0, 0.0, 0.1, 0.1]], np.float32)  # ymin xmin ymax xmax
    outputs = {"boxes": np.zeros((1, 3, 1, 4), np.float32), "logits": np.full((1, 3, 2), -10.0, np.float32)}
    post = create_postprocessor(ssd_spec(), outputs, (300, 300), {"anchors": anchors})
    # Anchor 0: shift the centre by +0.1 anchor heights in y, double the width: ty = 0.1 * 10, tw = ln 2 * 5.
    outputs["boxes"][0, 0, 0] = [1.0, 0.0, 0.0, np.log(2) * 5]
    outputs["logits"][0, 0, 1] = 2.0
    outputs["logits"][0, 1, 1] = 0.0  # sigmoid 0.5: not above the threshold
    detections = post(ResizeGeometry.plan(600, 300, Resize(width=300, height=300)))  # source twice as wide
    (d,) = list(detections)
    assert d.label == "person" and d.score == pytest.approx(1 / (1 + np.exp(-2)))
    cy, cx, h, w = 0.2 + 0.02, 0.3, 0.2, 0.4
    expected = [(cx - w / 2) * 600, (cy - h / 2) * 300, (cx + w / 2) * 600, (cy + h / 2) * 300]
    assert np.allclose(d.box, expected, atol=1e-3)


def test_ssd_softmax_and_clipping():
    anchors = np.array([[-0.2, -0.2, 0.2, 0.2]], np.float32)
    outputs = {"boxes": np.zeros((1, 1, 4), np.float32), "logits": np.array([[[0.0, 3.0]]], np.float32)}
    post = create_postprocessor(ssd_spec(score_activation="softmax"), outputs, (300, 300), {"anchors": anchors})
    (d,) = list(post(identity_geometry()))
    assert d.score == pytest.approx(np.exp(3) / (1 + np.exp(3)), rel=1e-5)
    assert np.allclose(d.box, [0, 0, 60, 60])  # clipped to the image


def test_ssd_checks_its_tensors():
    anchors = np.zeros((5, 4), np.float32)
    with pytest.raises(ModelError, match="holds 3 boxes but there are 5 anchors"):
        create_postprocessor(ssd_spec(), {"boxes": np.zeros((1, 3, 4)), "logits": np.zeros((1, 3, 2))}, (300, 300), {"anchors": anchors})
    with pytest.raises(ModelError, match="was not extracted"):
        create_postprocessor(ssd_spec(), {"boxes": np.zeros((1, 3, 4)), "logits": np.zeros((1, 3, 2))}, (300, 300), {})
    with pytest.raises(ModelError, match="names 1 class"):
        create_postprocessor(ssd_spec(), {"boxes": np.zeros((1, 5, 4)), "logits": np.zeros((1, 5, 4))}, (300, 300), {"anchors": anchors})


def yolo_spec(layout):
    return Postprocess(
        decoder={"kind": "yolo", "output": "out", "layout": layout},
        classes=["car", "person"],
        score_threshold=0.25,
        iou_threshold=0.5,
    )


def test_yolo_v5_and_v8_layouts_agree():
    # Two overlapping candidates for one person, one car, one below threshold, in a 640 x 640 letterbox of 1280 x 720.
    rows = np.array(
        [
            [320, 320, 100, 200, 0.9, 0.1, 0.9],  # person 0.81
            [325, 322, 100, 200, 0.8, 0.1, 0.9],  # person 0.72, suppressed by the first
            [100, 200, 50, 40, 1.0, 0.7, 0.1],  # car 0.7
            [500, 500, 30, 30, 0.2, 0.5, 0.5],  # 0.1: below threshold
        ],
        np.float32,
    )
    geometry = ResizeGeometry.plan(1280, 720, Resize(width=640, height=640, mode="letterbox"))
    v5 = create_postprocessor(yolo_spec("v5"), {"out": rows[None]}, (640, 640), {})
    found_v5 = [(d.label, round(d.score, 4), d.box) for d in v5(geometry)]
    v8_rows = np.hstack([rows[:, :4], rows[:, 5:] * rows[:, 4:5]])  # v8 has no objectness: fold it in
    v8 = create_postprocessor(yolo_spec("v8"), {"out": np.ascontiguousarray(v8_rows.T[None])}, (640, 640), {})
    found_v8 = [(d.label, round(d.score, 4), d.box) for d in v8(geometry)]
    assert [f[:2] for f in found_v5] == [("person", 0.81), ("car", 0.7)]
    assert [f[:2] for f in found_v8] == [("person", 0.81), ("car", 0.7)]
    # person: x 270..370, y 220..420 in the letterbox (pad_y 140, scale 0.5) -> source pixels
    assert np.allclose(found_v5[0][2], [540, 160, 740, 560], atol=1e-3)
    assert np.allclose(found_v8[0][2], found_v5[0][2], atol=1e-3)


def test_yolo_shape_errors():
    with pytest.raises(ModelError, match="scores 3"):
        create_postprocessor(yolo_spec("v5"), {"out": np.zeros((1, 10, 8), np.float32)}, (640, 640), {})
    with pytest.raises(ModelError, match="no output 'out'"):
        create_postprocessor(yolo_spec("v8"), {"other": np.zeros((1, 6, 10), np.float32)}, (640, 640), {})


def test_detections_are_capped_and_sorted():
    anchors = np.tile(np.array([[0.0, 0.0, 0.05, 0.05]], np.float32), (50, 1))
    anchors[:, [0, 2]] += np.arange(50)[:, None] * 0.019  # 50 disjoint boxes
    outputs = {"boxes": np.zeros((1, 50, 4), np.float32), "logits": np.zeros((1, 50, 2), np.float32)}
    outputs["logits"][0, :, 1] = np.linspace(1, 5, 50)
    spec = Postprocess(
        decoder={"kind": "ssd", "box_encodings": "boxes", "class_logits": "logits", "anchors": "a"},
        classes=["x"],
        max_detections=10,
    )
    found = list(create_postprocessor(spec, outputs, (300, 300), {"a": anchors})(identity_geometry()))
    assert len(found) == 10 and [d.score for d in found] == sorted((d.score for d in found), reverse=True)


# ---------------------------------------------------------------- MediaPipe-style SSD: generated anchors, xywh, linear, keypoints

BLAZEFACE_ANCHORS = {
    "generate": {
        "num_layers": 4,
        "min_scale": 0.1484375,
        "max_scale": 0.75,
        "input_size_width": 128,
        "input_size_height": 128,
        "strides": [8, 16, 16, 16],
        "aspect_ratios": [1.0],
        "fixed_anchor_size": True,
    }
}


def face_spec(**overrides):
    decoder = {
        "kind": "ssd",
        "box_encodings": "regressors",
        "class_logits": "classificators",
        "anchors": BLAZEFACE_ANCHORS,
        "box_layout": "xywh",
        "box_size": "linear",
        "scale_factors": [128, 128, 128, 128],
        "keypoints": 6,
        "background_class": False,
        "clip_boxes": False,
    } | overrides
    return Postprocess(decoder=decoder, classes=["face"], score_threshold=0.5, iou_threshold=0.3)


def face_outputs():
    return {"regressors": np.zeros((1, 896, 16), np.float32), "classificators": np.full((1, 896, 1), -20.0, np.float32)}


def test_blazeface_style_rows_decode_linearly_with_keypoints_through_a_letterbox():
    outputs = face_outputs()
    post = create_postprocessor(face_spec(), outputs, (128, 128), {})  # no tensors: the anchors are generated
    # Anchor 566 is centred at (0.1875, 0.1875), w = h = 1 (see test_anchors). Row: x, y, w, h, then 6 x (x, y), / 128.
    outputs["regressors"][0, 566, :6] = [6.4, 25.6, 25.6, 12.8, -12.8, 6.4]
    outputs["classificators"][0, 566, 0] = 2.0
    # The same face from the next anchor (566 + 1, same centre), weaker: NMS keeps the first, with its own keypoints.
    outputs["regressors"][0, 567, :6] = [6.0, 25.0, 25.6, 12.8, 0.0, 0.0]
    outputs["classificators"][0, 567, 0] = 1.0
    # A 256 x 128 frame letterboxed into 128 x 128: scale 0.5, content 128 x 64 at pad_y 32.
    geometry = ResizeGeometry.plan(256, 128, Resize(width=128, height=128, mode="letterbox"))
    (d,) = list(post(geometry))
    assert d.label == "face" and d.score == pytest.approx(1 / (1 + np.exp(-2.0)))
    # cx = 0.1875 + 6.4 / 128 = 0.2375, cy = 0.1875 + 25.6 / 128 = 0.3875, w = 0.2, h = 0.1 -> network pixels
    # x 17.6..43.2, y 43.2..56.0 -> source: x / 0.5, (y - 32) / 0.5.
    assert np.allclose(d.box, [35.2, 22.4, 86.4, 48.0], atol=1e-4)
    # Keypoint 0: x 0.1875 - 0.1 = 0.0875 -> 11.2 px -> 22.4; y 0.1875 + 0.05 = 0.2375 -> 30.4 px -> -3.2 (outside: not clipped).
    assert len(d.keypoints) == 6
    assert np.allclose(d.keypoints[0], (22.4, -3.2), atol=1e-4)
    assert np.allclose(d.keypoints[1], (0.1875 * 256, (0.1875 * 128 - 32) * 2), atol=1e-4)  # raw 0: the anchor centre


def test_yxhw_keypoints_read_y_first_as_mediapipe_without_reverse_output_order():
    outputs = face_outputs()
    post = create_postprocessor(face_spec(box_layout="yxhw"), outputs, (128, 128), {})
    outputs["regressors"][0, 566, :6] = [25.6, 6.4, 12.8, 25.6, 6.4, -12.8]  # y, x, h, w; keypoint y, x
    outputs["classificators"][0, 566, 0] = 2.0
    (d,) = list(post(ResizeGeometry.plan(256, 128, Resize(width=128, height=128, mode="letterbox"))))
    assert np.allclose(d.box, [35.2, 22.4, 86.4, 48.0], atol=1e-4) and np.allclose(d.keypoints[0], (22.4, -3.2), atol=1e-4)


def test_xywh_is_yxhw_with_the_columns_swapped_and_linear_is_the_log_of_exp():
    rng = np.random.default_rng(7)
    anchors = np.sort(rng.uniform(0, 1, (40, 2, 2)), axis=1).reshape(40, 4)[:, [0, 2, 1, 3]]  # y1 x1 y2 x2, ordered
    rows = rng.normal(0, 1, (1, 40, 4)).astype(np.float32)
    logits = rng.normal(0, 3, (1, 40, 2)).astype(np.float32)
    geometry = identity_geometry()

    def run(spec, boxes):
        post = create_postprocessor(spec, {"boxes": boxes, "logits": logits}, (300, 300), {"anchors": anchors})
        return [(d.score, d.box) for d in post(geometry)]

    reference = run(ssd_spec(), rows)
    swapped = np.ascontiguousarray(rows[..., [1, 0, 3, 2]])
    assert run(ssd_spec(box_layout="xywh", scale_factors=[10.0, 10.0, 5.0, 5.0]), swapped) == reference
    linear = rows.copy()
    linear[..., 2:] = np.exp(rows[..., 2:] / 5.0) * 5.0  # t / 5 = exp(t' / 5)
    found = run(ssd_spec(box_size="linear"), linear)
    assert [s for s, _ in found] == [s for s, _ in reference] and np.allclose([b for _, b in found], [b for _, b in reference], atol=1e-3)


def test_keypoints_not_asked_for_are_left_unread_and_too_many_are_refused():
    outputs = face_outputs()
    outputs["regressors"][0, 566, :6] = [6.4, 25.6, 25.6, 12.8, -12.8, 6.4]
    outputs["classificators"][0, 566, 0] = 2.0
    geometry = ResizeGeometry.plan(256, 128, Resize(width=128, height=128, mode="letterbox"))
    (d,) = list(create_postprocessor(face_spec(keypoints=0), outputs, (128, 128), {})(geometry))  # [1, 896, 16], boxes only
    assert np.allclose(d.box, [35.2, 22.4, 86.4, 48.0], atol=1e-4) and d.keypoints == ()
    (d,) = list(create_postprocessor(face_spec(keypoints=2), outputs, (128, 128), {})(geometry))
    assert len(d.keypoints) == 2 and np.allclose(d.keypoints[0], (22.4, -3.2), atol=1e-4)
    with pytest.raises(ModelError, match=r"\[1, 896, 16\] holds 16 values per anchor, but keypoints: 7 reads 18") as info:
        create_postprocessor(face_spec(keypoints=7), face_outputs(), (128, 128), {})
    assert "keypoints to at most 6" in info.value.hint
    outputs = {"regressors": np.zeros((1, 512, 16), np.float32), "classificators": np.zeros((1, 896, 1), np.float32)}
    with pytest.raises(ModelError, match="holds 512 boxes but there are 896 anchors"):
        create_postprocessor(face_spec(), outputs, (128, 128), {})


def test_a_negative_linear_size_is_dropped_as_mediapipe_drops_it():
    outputs = face_outputs()
    post = create_postprocessor(face_spec(), outputs, (128, 128), {})
    outputs["regressors"][0, 566, :4] = [0.0, 0.0, -10.0, 12.8]  # w < 0
    outputs["regressors"][0, 300, :4] = [0.0, 0.0, 10.0, 12.8]
    outputs["classificators"][0, [300, 566], 0] = [1.0, 3.0]
    (d,) = list(post(identity_geometry(128, 128)))
    assert d.score == pytest.approx(1 / (1 + np.exp(-1.0)))


def test_detections_without_keypoints_keep_their_digest_and_record():
    """A decoder without keypoints hashes and yields exactly what it did before keypoints existed."""
    import hashlib

    anchors = np.array([[0.1, 0.2, 0.3, 0.4]], np.float32)
    outputs = {"boxes": np.zeros((1, 1, 4), np.float32), "logits": np.array([[[0.0, 2.0]]], np.float32)}
    found = create_postprocessor(ssd_spec(), outputs, (300, 300), {"anchors": anchors})(identity_geometry())
    h = hashlib.blake2b(found.boxes[:1].data, digest_size=8)
    h.update(found.scores[:1].data)
    h.update(found.class_ids[:1].data)
    assert found.digest() == int.from_bytes(h.digest(), "little")
    assert list(found)[0].keypoints == ()
