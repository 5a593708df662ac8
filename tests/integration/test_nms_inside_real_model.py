"""`kind: nms_inside` on a real published detector that ends in NMS: no package on PyPI ships one in ONNX that we
could find, so the test makes one, appending to the real MediaPipe BlazeFace (tests/integration/assets) its box
decoding and an ONNX NonMaxSuppression head with TF Object Detection API outputs (normalised y1, x1, y2, x2; scores;
1-based classes; a count), padded to 100 rows. The reference is ONNX Runtime's own NMS output, mapped to frame pixels
by a plain script; the SDK must read it as it is (its own NMS skipped, and the report says so)."""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.integration.mediapipe_reference import deploy_local, reference_anchors
from tests.integration.test_blazeface_real_model import one_box_and_one_score_tensor, portrait_frames

ASSETS = Path(__file__).resolve().parent / "assets"
FRAMES = 16
ROWS = 100

PIPELINE = """\
version: 1
name: blazeface-nms
source: {uri: "images://frames"}
preprocess:
  resize: {width: 128, height: 128, mode: letterbox, pad_value: 0}
  color: rgb
  normalize: {scale: 0.00784313725490196, mean: [1.0, 1.0, 1.0]}
  layout: nhwc
  dtype: float32
model: {path: blazeface_nms.onnx, threads: 1}
postprocess:
  decoder:
    kind: nms_inside
    boxes: detection_boxes
    scores: detection_scores
    classes: detection_classes
    count: num_detections
    box_format: yxyx
    normalized: true
    class_offset: 1
  classes: [face]
  score_threshold: 0.5
budgets:
  end_to_end: {p50_ms: 60000, max_ms: 60000}
"""


def with_nms_head(source: Path, target: Path) -> Path:
    """BlazeFace (one box and one score tensor) + box decoding + NonMaxSuppression (IoU 0.3, score 0.5, 100 at most)."""
    model = onnx.load(str(one_box_and_one_score_tensor(source, target)))
    graph = model.graph
    anchors = reference_anchors().astype(np.float32)  # [896, 4] cx, cy, w (1), h (1)
    centre = np.zeros((896, 4), np.float32)
    centre[:, :2] = anchors[:, :2]
    # cx, cy, w, h -> y1, x1, y2, x2 as one matrix product
    to_yxyx = np.array([[0, 1, 0, 1], [1, 0, 1, 0], [0, -0.5, 0, 0.5], [-0.5, 0, 0.5, 0]], np.float32)
    consts = {
        "starts": np.array([0], np.int64),
        "ends": np.array([4], np.int64),
        "axes": np.array([2], np.int64),
        "input_px": np.array(128.0, np.float32),
        "centre": centre,
        "to_yxyx": to_yxyx,
        "max_out": np.array([ROWS], np.int64),
        "iou": np.array([0.3], np.float32),
        "min_score": np.array([0.5], np.float32),
        "column2": np.array([2], np.int64),
        "pad_boxes": np.zeros((ROWS, 4), np.float32),
        "pad_rows": np.zeros(ROWS, np.float32),
        "zero": np.array([0], np.int64),
        "rows": np.array([ROWS], np.int64),
        "axis0": np.array([0], np.int64),
        "flat": np.array([-1], np.int64),
        "box_rows": np.array([896, 4], np.int64),
        "boxes_shape": np.array([1, ROWS, 4], np.int64),
        "rows_shape": np.array([1, ROWS], np.int64),
    }
    graph.initializer.extend(numpy_helper.from_array(v, k) for k, v in consts.items())
    n = helper.make_node
    graph.node.extend(
        [
            n("Slice", ["regressors", "starts", "ends", "axes"], ["raw_box"]),
            n("Div", ["raw_box", "input_px"], ["box_t"]),
            n("Add", ["box_t", "centre"], ["cxcywh"]),  # fixed anchor size 1: the offsets are the box
            n("Sigmoid", ["classificators"], ["probability"]),  # [1, 896, 1]
            n("Transpose", ["probability"], ["nms_scores"], perm=[0, 2, 1]),  # [1, 1, 896]
            n("NonMaxSuppression", ["cxcywh", "nms_scores", "max_out", "iou", "min_score"], ["selected"], center_point_box=1),
            n("Gather", ["selected", "column2"], ["picked2"], axis=1),
            n("Reshape", ["picked2", "flat"], ["picked"]),
            n("MatMul", ["cxcywh", "to_yxyx"], ["yxyx"]),
            n("Reshape", ["yxyx", "box_rows"], ["yxyx_rows"]),
            n("Gather", ["yxyx_rows", "picked"], ["kept_boxes"], axis=0),
            n("Reshape", ["probability", "flat"], ["probability_flat"]),
            n("Gather", ["probability_flat", "picked"], ["kept_scores"], axis=0),
            n("Shape", ["picked"], ["num_detections"]),
            n("Concat", ["kept_boxes", "pad_boxes"], ["boxes_padded"], axis=0),
            n("Slice", ["boxes_padded", "zero", "rows", "axis0"], ["boxes_rows"]),
            n("Reshape", ["boxes_rows", "boxes_shape"], ["detection_boxes"]),
            n("Concat", ["kept_scores", "pad_rows"], ["scores_padded"], axis=0),
            n("Slice", ["scores_padded", "zero", "rows", "axis0"], ["scores_rows"]),
            n("Reshape", ["scores_rows", "rows_shape"], ["detection_scores"]),
            n("Mul", ["scores_rows", "zero_f"], ["class_zero"]),
            n("Add", ["class_zero", "one_f"], ["class_rows"]),  # TF OD API: class 1 is the first class
            n("Reshape", ["class_rows", "rows_shape"], ["detection_classes"]),
        ]
    )
    graph.initializer.extend(
        [numpy_helper.from_array(np.array(0.0, np.float32), "zero_f"), numpy_helper.from_array(np.array(1.0, np.float32), "one_f")]
    )
    del graph.output[:]
    graph.output.extend(
        [
            helper.make_tensor_value_info("detection_boxes", TensorProto.FLOAT, [1, ROWS, 4]),
            helper.make_tensor_value_info("detection_scores", TensorProto.FLOAT, [1, ROWS]),
            helper.make_tensor_value_info("detection_classes", TensorProto.FLOAT, [1, ROWS]),
            helper.make_tensor_value_info("num_detections", TensorProto.INT64, [1]),
        ]
    )
    onnx.checker.check_model(model)
    onnx.save(model, str(target))
    return target


def reference(session, bgr: np.ndarray) -> list[tuple[float, list[float]]]:
    """ONNX Runtime's NMS output for this frame, in frame pixels: (score, [x1, y1, x2, y2]), as the model orders them."""
    height, width = bgr.shape[:2]
    scale = min(128 / width, 128 / height)
    content_w, content_h = round(width * scale), round(height * scale)
    pad_x, pad_y = (128 - content_w) // 2, (128 - content_h) // 2
    rgb = cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB).astype(np.float32)
    canvas = np.zeros((128, 128, 3), np.float32)
    canvas[pad_y : pad_y + content_h, pad_x : pad_x + content_w] = cv2.resize(rgb, (content_w, content_h), interpolation=cv2.INTER_LINEAR)
    boxes, scores, classes, count = session.run(None, {"input:0": (canvas / 127.5 - 1.0)[None]})
    found = []
    for i in range(int(count[0])):
        y1, x1, y2, x2 = (boxes[0, i] * 128).tolist()
        corners = [(x1 - pad_x) / scale, (y1 - pad_y) / scale, (x2 - pad_x) / scale, (y2 - pad_y) / scale]
        corners = [min(max(v, 0.0), width if k % 2 == 0 else height) for k, v in enumerate(corners)]
        assert classes[0, i] == 1.0
        found.append((float(scores[0, i]), corners))
    return found


@pytest.mark.slow
def test_a_real_detector_ending_in_nms_is_read_as_it_is(tmp_path):
    folder = tmp_path / "nms"
    (folder / "frames").mkdir(parents=True)
    model = with_nms_head(ASSETS / "blazeface_front_128.onnx", folder / "blazeface_nms.onnx")
    frames = portrait_frames(cv2.imread(str(ASSETS / "astronaut_256.jpg")), FRAMES)
    for i, frame in enumerate(frames):
        cv2.imwrite(str(folder / "frames" / f"{i:03d}.png"), frame)
    (folder / "blazeface.yaml").write_text(PIPELINE)
    lines = deploy_local(folder / "blazeface.yaml", FRAMES, tmp_path / "state", tmp_path / "reports")
    report = json.loads((tmp_path / "reports" / "report.json").read_text())
    assert "NMS ran inside the model; the SDK's NMS is skipped" in report["postprocess"], report["postprocess"]

    quiet = ort.SessionOptions()
    quiet.log_severity_level = 3
    session = ort.InferenceSession(str(model), quiet, providers=["CPUExecutionProvider"])
    total, counts = 0, set()
    for frame, line in zip(frames, lines, strict=True):
        theirs = reference(session, frame)
        ours = line["detections"]
        counts.add(len(theirs))
        # Every detection the model's NMS kept, in its order (best first), no more and no fewer.
        assert len(ours) == len(theirs), (line["frame"], ours, theirs)
        for d, (score, box) in zip(ours, theirs, strict=True):
            assert d["label"] == "face" and abs(d["score"] - score) <= 0.01
            assert max(abs(a - b) for a, b in zip(d["box"], box, strict=True)) <= 1.0, (d, box)
        total += len(ours)
    assert total >= FRAMES and max(counts) >= 2, "the real model should find the faces, two in some frames"
