"""YOLOX and anchor-based YOLOv5 raw heads against plain references written from the projects' own decoding
(YOLOX's demo_postprocess + multiclass NMS, YOLOv5's Detect): Megvii's real YOLOX-Nano on real video
(tests/integration/assets/yolox_nano.onnx, pre- and postprocessing as YOLOX's demo), and heads with planted objects for
the edge cases (no raw-head YOLOv5 ONNX model could be obtained, docs/decisions/0503)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sdk.errors import ModelError
from sdk.geometry import ResizeGeometry
from sdk.postprocess import create_postprocessor
from sdk.spec.schema import Postprocess, Preprocess, Resize
from tests.integration import yolox_reference as yolox_demo
from tests.integration.test_blazeface_real_model import ASSETS

NET_W, NET_H, SRC_W, SRC_H = 96, 64, 300, 150
ANCHORS = {8: [[10, 13], [16, 30], [33, 23]], 16: [[30, 61], [62, 45], [59, 119]], 32: [[116, 90], [156, 198], [373, 326]]}


def geometry() -> ResizeGeometry:
    return ResizeGeometry.plan(SRC_W, SRC_H, Resize(width=NET_W, height=NET_H, mode="letterbox"))


def iou(a, b) -> float:
    w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = w * h
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


def finish(boxes, scores, classes, threshold=0.3, iou_threshold=0.5):
    """Best class, threshold, greedy per-class NMS, letterbox -> frame pixels: (class, score, box) best first."""
    found = sorted(((s, c, b) for b, s, c in zip(boxes, scores, classes, strict=True) if s > threshold), key=lambda f: -f[0])
    kept = []
    for s, c, b in found:
        if all(c != kc or iou(b, kb) <= iou_threshold for _, kc, kb in kept):
            kept.append((s, c, b))
    g = geometry()
    scale, px, py = g.scale_x, g.pad_x, g.pad_y
    out = []
    for s, c, b in kept:
        x1, y1, x2, y2 = ((b[0] - px) / scale, (b[1] - py) / scale, (b[2] - px) / scale, (b[3] - py) / scale)
        out.append((c, s, [min(max(x1, 0), SRC_W), min(max(y1, 0), SRC_H), min(max(x2, 0), SRC_W), min(max(y2, 0), SRC_H)]))
    return out


def yolox_reference(head: np.ndarray, strides=(8, 16, 32)):
    """YOLOX demo_postprocess (grids and strides from the input size), then obj x class, best class."""
    grids, expanded = [], []
    for stride in strides:
        hsize, wsize = NET_H // stride, NET_W // stride
        xv, yv = np.meshgrid(np.arange(wsize), np.arange(hsize))
        grids.append(np.stack((xv, yv), 2).reshape(1, -1, 2))
        expanded.append(np.full((1, hsize * wsize, 1), stride))
    grids, expanded = np.concatenate(grids, 1), np.concatenate(expanded, 1)
    out = head.astype(np.float64).copy()
    out[..., :2] = (out[..., :2] + grids) * expanded
    out[..., 2:4] = np.exp(out[..., 2:4]) * expanded
    rows = out[0]
    cxcywh = rows[:, :4]
    boxes = np.stack(
        [cxcywh[:, 0] - cxcywh[:, 2] / 2, cxcywh[:, 1] - cxcywh[:, 3] / 2, cxcywh[:, 0] + cxcywh[:, 2] / 2, cxcywh[:, 1] + cxcywh[:, 3] / 2], 1
    )
    scores = rows[:, 4:5] * rows[:, 5:]
    best = scores.argmax(1)
    return finish(boxes, scores[np.arange(len(rows)), best], best)


def v5_reference(head: np.ndarray):
    """YOLOv5 Detect: per scale, sigmoid; xy = (2 s - 0.5 + grid) * stride; wh = (2 s)^2 * anchor; rows (anchor, y, x)."""
    rows, start = [], 0
    for stride, anchors in ANCHORS.items():
        ny, nx, na = NET_H // stride, NET_W // stride, len(anchors)
        block = head[0, start : start + na * ny * nx].astype(np.float64).reshape(na, ny, nx, -1)
        start += na * ny * nx
        y = 1 / (1 + np.exp(-block))
        for a in range(na):
            for gy in range(ny):
                for gx in range(nx):
                    s = y[a, gy, gx]
                    cx, cy = (s[0] * 2 - 0.5 + gx) * stride, (s[1] * 2 - 0.5 + gy) * stride
                    w, h = (s[2] * 2) ** 2 * anchors[a][0], (s[3] * 2) ** 2 * anchors[a][1]
                    rows.append([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2, s[4], *s[5:]])
    rows = np.array(rows)
    scores = rows[:, 4:5] * rows[:, 5:]
    best = scores.argmax(1)
    return finish(rows[:, :4], scores[np.arange(len(rows)), best], best)


def yolox_head(seed: int, classes: int = 3) -> np.ndarray:
    rng = np.random.default_rng(seed)
    count = sum((NET_H // s) * (NET_W // s) for s in (8, 16, 32))
    head = np.empty((1, count, 5 + classes), np.float32)
    head[..., :2] = rng.uniform(0, 1, (count, 2))
    head[..., 2:4] = rng.uniform(-0.5, 1.5, (count, 2))
    head[..., 4] = rng.uniform(0, 0.2, count)
    head[..., 5:] = rng.uniform(0, 1, (count, classes))
    for row in rng.choice(count, 12, replace=False):  # planted objects
        head[0, row, 4] = rng.uniform(0.5, 1.0)
    return head


def v5_head(seed: int, classes: int = 3) -> np.ndarray:
    rng = np.random.default_rng(seed)
    count = sum(len(a) * (NET_H // s) * (NET_W // s) for s, a in ANCHORS.items())
    head = rng.normal(0, 1.5, (1, count, 5 + classes)).astype(np.float32)
    head[..., 4] = rng.normal(-6, 1, count)
    for row in rng.choice(count, 15, replace=False):
        head[0, row, 4] = rng.uniform(1, 5)
        head[0, row, 5 + rng.integers(classes)] = rng.uniform(2, 6)
    return head


def compare(ours, theirs) -> None:
    assert len(ours) == len(theirs) and len(theirs) >= 4, (len(ours), len(theirs))
    for d, (c, s, b) in zip(ours, theirs, strict=True):
        assert d.class_id == c and abs(d.score - s) <= 0.01, (d, c, s)
        assert max(abs(p - q) for p, q in zip(d.box, b, strict=True)) <= 1.0, (d.box, b)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_yolox_matches_its_own_decoding(seed):
    head = yolox_head(seed)
    spec = Postprocess.model_validate(
        {"decoder": {"kind": "yolo", "output": "out", "layout": "yolox"}, "classes": ["a", "b", "c"], "score_threshold": 0.3, "iou_threshold": 0.5}
    )
    post = create_postprocessor(spec, {"out": head}, (NET_W, NET_H), {})
    compare(list(post(geometry())), yolox_reference(head))
    assert "YOLO yolox, 126 candidates" in post.describe()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_anchor_based_v5_matches_yolov5_detect(seed):
    head = v5_head(seed)
    spec = Postprocess.model_validate(
        {"decoder": {"kind": "yolo", "output": "out", "layout": "v5", "anchors": ANCHORS}, "classes": ["a", "b", "c"], "iou_threshold": 0.5}
    )
    post = create_postprocessor(spec, {"out": head}, (NET_W, NET_H), {})
    compare(list(post(geometry())), v5_reference(head))


def test_a_head_of_the_wrong_size_for_the_grids_is_refused_naming_both():
    spec = Postprocess.model_validate({"decoder": {"kind": "yolo", "output": "out", "layout": "yolox"}, "classes": ["a", "b", "c"]})
    with pytest.raises(ModelError, match=r"has 126 rows but strides \[8, 16, 32\] on 128x64 make 168 cells"):
        create_postprocessor(spec, {"out": yolox_head(0)}, (128, 64), {})


def test_decoded_v5_and_v8_are_unchanged():
    rows = np.zeros((1, 3, 6), np.float32)
    rows[0, 1] = [48, 32, 20, 10, 0.9, 0.8]
    spec = Postprocess.model_validate({"decoder": {"kind": "yolo", "output": "out", "layout": "v5"}, "classes": ["a"]})
    (d,) = list(create_postprocessor(spec, {"out": rows}, (NET_W, NET_H), {})(geometry()))
    assert math.isclose(d.score, 0.72, rel_tol=1e-6) and d.box == pytest.approx(
        [38 / 0.32, (27 - 8) / 0.32, 58 / 0.32, (37 - 8) / 0.32], abs=0.01
    )  # pad_y 8


def test_the_real_yolox_nano_through_the_sdks_preprocessing_and_decoder_matches_yoloxs_demo():
    """Top-left letterbox with 114, BGR 0..255 (preprocess.resize.align: top_left), the grid decoder and class-agnostic
    NMS at 0.45 (postprocess.nms) against YOLOX's demo, on three frames of a real street video."""
    import cv2
    import onnxruntime as ort

    from sdk.preprocess import CpuPreprocessor
    from tools.models.family_decoders import COCO_CLASSES

    session = ort.InferenceSession(str(ASSETS / "yolox_nano.onnx"), providers=["CPUExecutionProvider"])
    preprocess = Preprocess.model_validate(
        {"resize": {"width": 416, "height": 416, "mode": "letterbox", "align": "top_left"}, "color": "bgr", "normalize": {"scale": 1.0}}
    )
    spec = Postprocess.model_validate(
        {
            "decoder": {"kind": "yolo", "output": "output", "layout": "yolox"},
            "classes": list(COCO_CLASSES),
            "iou_threshold": 0.45,
            "nms": "class_agnostic",
        }
    )
    tensor, head = np.zeros((1, 3, 416, 416), np.float32), np.zeros((1, 3549, 85), np.float32)
    pre, post = CpuPreprocessor(preprocess, tensor), create_postprocessor(spec, {"output": head}, (416, 416), {})
    video = cv2.VideoCapture(str(ASSETS.parent.parent.parent / "pipelines" / "assets" / "vtest.avi"))
    for _ in range(3):
        ok, frame = video.read()
        assert ok
        geometry = pre(frame)
        assert (geometry.pad_x, geometry.pad_y, geometry.content_height) == (0, 0, 312)  # 768 x 576 -> 416 x 312, top left
        head[...] = session.run(None, {"images": tensor})[0]
        ours = [(d.class_id, d.score, list(d.box)) for d in post(geometry)]
        theirs = yolox_demo.detect(session, frame)
        assert len(theirs) >= 5 and {COCO_CLASSES[c] for c, _, _ in theirs} >= {"person", "car"}
        yolox_demo.assert_same(ours, theirs, px=0.5, score=0.005)
    video.release()


def test_class_agnostic_nms_suppresses_across_classes_and_per_class_does_not():
    head = np.zeros((1, 126, 7), np.float32)  # 96 x 64 at strides 8, 16, 32; two classes
    head[0, 0] = [0.5, 0.5, 1.0, 1.0, 0.9, 0.9, 0.1]  # class a at cell 0
    head[0, 1] = [0.0, 0.5, 1.0, 1.0, 0.8, 0.1, 0.9]  # class b, half a cell to the left: IoU about 0.7
    found = {}
    for nms in ("per_class", "class_agnostic"):
        spec = Postprocess.model_validate({"decoder": {"kind": "yolo", "output": "out", "layout": "yolox"}, "classes": ["a", "b"], "nms": nms})
        found[nms] = [d.label for d in create_postprocessor(spec, {"out": head}, (NET_W, NET_H), {})(geometry())]
    assert found == {"per_class": ["a", "b"], "class_agnostic": ["a"]}
