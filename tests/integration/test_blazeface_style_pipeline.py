"""A BlazeFace-style SSD end to end through `deploy --target local`, against a reference written here from MediaPipe's
documented semantics (SsdAnchorsCalculator, TensorsToDetectionsCalculator), in plain numpy, without the SDK.

The model is a real ONNX graph built here with BlazeFace's interface: NHWC float input [1, 128, 128, 3], boxes
[1, 896, 16] (x, y, w, h, six keypoints, in input pixels) and scores [1, 896, 1]. Its outputs follow the frames
(8 x 8 and 16 x 16 average pools under 1 x 1 convolutions with seeded weights) around biases placed to put faces,
some of them twice (neighbouring anchors) so that NMS has work. It runs on the example's real video.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper, save

REPO = Path(__file__).resolve().parents[2]
FRAMES = 40
SIZE = 128
THRESHOLD, IOU = 0.5, 0.3

# (anchor index, logit bias, x, y, w, h offsets in input pixels): faces the biases put in the picture.
FACES = [
    (2 * (6 * 16 + 3), 2.5, 3.0, -2.0, 22.0, 26.0),
    (2 * (6 * 16 + 3) + 1, 1.8, 2.0, -1.0, 21.0, 25.0),  # the same face again, weaker: suppressed
    (2 * (7 * 16 + 11), 3.0, -4.0, 5.0, 18.0, 20.0),
    (2 * (9 * 16 + 6), 1.2, 0.0, 0.0, 14.0, 16.0),  # near the threshold: comes and goes with the frames
    (512 + 6 * (3 * 8 + 5) + 2, 2.2, 6.0, 4.0, 40.0, 44.0),
    (512 + 6 * (3 * 8 + 5) + 4, 2.0, 5.0, 3.0, 38.0, 46.0),  # the same, weaker
    (512 + 6 * (5 * 8 + 2), 0.6, -8.0, -6.0, 30.0, 34.0),
    (512 + 6 * (4 * 8 + 4) + 5, 3.5, 0.0, 2.0, 52.0, 60.0),
    # Where pedestrians pass, the pooled frame moves these logits by several units: faces that come and go.
    (2 * (8 * 16 + 14) + 1, -3.0, 0.0, 0.0, 24.0, 28.0),
    (2 * (7 * 16 + 8) + 1, -4.0, 2.0, 1.0, 20.0, 22.0),
]


def blazeface_style_model(path: Path) -> Path:
    rng = np.random.default_rng(20)
    initializers, nodes = [], [helper.make_node("Transpose", ["input"], ["nchw"], perm=[0, 3, 1, 2])]

    def const(name: str, value, dtype=np.float32) -> str:
        initializers.append(numpy_helper.from_array(np.asarray(value, dtype), name))
        return name

    score_bias = np.full(896, -8.0)
    box_bias = np.zeros((896, 16))
    box_bias[:, 2:4] = 20.0
    box_bias[:, 4:] = rng.uniform(-10, 10, (896, 12))
    for anchor, logit, *box in FACES:
        score_bias[anchor] = logit
        box_bias[anchor, :4] = box
    scores, boxes = [], []
    for name, stride, cells, per_cell, first in (("s8", 8, 16, 2, 0), ("s16", 16, 8, 6, 512)):
        pool = f"{name}_pool"
        nodes.append(helper.make_node("AveragePool", ["nchw"], [pool], kernel_shape=[stride, stride], strides=[stride, stride]))
        count = cells * cells * per_cell
        for kind, width, bias, gain in (("score", 1, score_bias, 3.0), ("box", 16, box_bias, 1.5)):
            out = f"{name}_{kind}"
            channels = per_cell * width
            # A 1 x 1 convolution of the pooled frame, to [1, cells, cells, channels]: channel a * width + k of a cell is
            # value k of its anchor a, cell-major as the anchors are; then a bias per anchor and value.
            nodes.append(helper.make_node("Conv", [pool, const(f"{out}_w", rng.normal(0, gain, (channels, 3, 1, 1)))], [f"{out}_conv"]))
            nodes.append(helper.make_node("Transpose", [f"{out}_conv"], [f"{out}_nhwc"], perm=[0, 2, 3, 1]))
            per_anchor = bias[first : first + count].reshape(1, cells, cells, channels)
            nodes.append(helper.make_node("Add", [f"{out}_nhwc", const(f"{out}_b", per_anchor)], [f"{out}_biased"]))
            nodes.append(helper.make_node("Reshape", [f"{out}_biased", const(f"{out}_shape", [1, count, width], np.int64)], [out]))
            (scores if kind == "score" else boxes).append(out)
    nodes.append(helper.make_node("Concat", boxes, ["regressors"], axis=1))
    nodes.append(helper.make_node("Concat", scores, ["classificators"], axis=1))
    graph = helper.make_graph(
        nodes,
        "blazeface_style",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, SIZE, SIZE, 3])],
        [
            helper.make_tensor_value_info("regressors", TensorProto.FLOAT, [1, 896, 16]),
            helper.make_tensor_value_info("classificators", TensorProto.FLOAT, [1, 896, 1]),
        ],
        initializer=initializers,
    )
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), str(path))
    return path


PIPELINE = """\
version: 1
name: faces
source:
  uri: file://vtest.avi
preprocess:
  resize: {width: 128, height: 128, mode: letterbox, pad_value: 0}
  color: rgb
  normalize: {scale: 0.00784313725490196, mean: [1.0, 1.0, 1.0]}   # x / 127.5 - 1, as MediaPipe feeds BlazeFace
  layout: nhwc
  dtype: float32
model:
  path: face.onnx
  threads: 1
postprocess:
  decoder:
    kind: ssd
    box_encodings: regressors
    class_logits: classificators
    anchors:
      generate:
        num_layers: 4
        min_scale: 0.1484375
        max_scale: 0.75
        input_size_width: 128
        input_size_height: 128
        anchor_offset_x: 0.5
        anchor_offset_y: 0.5
        strides: [8, 16, 16, 16]
        aspect_ratios: [1.0]
        fixed_anchor_size: true
        interpolated_scale_aspect_ratio: 1.0
        reduce_boxes_in_lowest_layer: false
    box_layout: xywh
    box_size: linear
    scale_factors: [128, 128, 128, 128]
    keypoints: 6
    background_class: false
    clip_boxes: false
  classes: [face]
  score_threshold: 0.5
  iou_threshold: 0.3
sinks:
  - {kind: jsonl, path: detections.jsonl}
budgets:
  end_to_end: {p50_ms: 60000, max_ms: 60000}
"""


# ---------------------------------------------------------------- the reference: MediaPipe's semantics, plain numpy


def reference_anchors() -> np.ndarray:
    """[896, 4] x_center, y_center, w, h: SsdAnchorsCalculator for face_detection_short_range, written out as loops."""
    strides, min_scale, max_scale = [8, 16, 16, 16], 0.1484375, 0.75
    anchors, layer = [], 0
    while layer < len(strides):
        per_cell, last = 0, layer
        while last < len(strides) and strides[last] == strides[layer]:
            per_cell += 2  # aspect ratio 1.0, plus the interpolated anchor (interpolated_scale_aspect_ratio 1.0 > 0)
            last += 1
        cells = math.ceil(SIZE / strides[layer])
        for y in range(cells):
            for x in range(cells):
                for _ in range(per_cell):
                    anchors.append(((x + 0.5) / cells, (y + 0.5) / cells, 1.0, 1.0))  # fixed_anchor_size: w = h = 1
        layer = last
    del min_scale, max_scale  # fixed_anchor_size: the scales do not reach the anchors
    return np.array(anchors)


def reference_detections(session, bgr: np.ndarray, anchors: np.ndarray) -> list[tuple[float, list[float], np.ndarray]]:
    """(score, [x1, y1, x2, y2], keypoints [6, 2]) in frame pixels, best first."""
    height, width = bgr.shape[:2]
    scale = min(SIZE / width, SIZE / height)
    content_w, content_h = round(width * scale), round(height * scale)
    pad_x, pad_y = (SIZE - content_w) // 2, (SIZE - content_h) // 2
    rgb = cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB).astype(np.float32)
    canvas = np.zeros((SIZE, SIZE, 3), np.float32)  # pad value 0
    canvas[pad_y : pad_y + content_h, pad_x : pad_x + content_w] = cv2.resize(rgb, (content_w, content_h), interpolation=cv2.INTER_LINEAR)
    raw_boxes, raw_scores = session.run(["regressors", "classificators"], {"input": (canvas / 127.5 - 1.0)[None]})
    raw_boxes, raw_scores = raw_boxes[0].astype(np.float64), raw_scores[0, :, 0].astype(np.float64)
    found = []
    for i in range(len(anchors)):
        score = 1.0 / (1.0 + math.exp(-min(max(raw_scores[i], -100.0), 100.0)))  # score_clipping_thresh 100
        if score < THRESHOLD:
            continue
        ax, ay, aw, ah = anchors[i]
        r = raw_boxes[i]
        # reverse_output_order (x first); x_scale = y_scale = w_scale = h_scale = 128; no exponential on the size.
        cx, cy = r[0] / 128 * aw + ax, r[1] / 128 * ah + ay
        w, h = r[2] / 128 * aw, r[3] / 128 * ah
        points = np.array([[r[4 + 2 * k] / 128 * aw + ax, r[5 + 2 * k] / 128 * ah + ay] for k in range(6)])
        found.append((score, np.array([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2]), points))
    found.sort(key=lambda f: -f[0])
    kept = []
    for candidate in found:  # greedy NMS, IoU above 0.3 suppresses
        if all(iou(candidate[1], other[1]) <= IOU for other in kept):
            kept.append(candidate)

    def to_frame(xy: np.ndarray) -> np.ndarray:  # normalised input -> letterbox pixels -> frame pixels
        return np.stack([(xy[..., 0] * SIZE - pad_x) / scale, (xy[..., 1] * SIZE - pad_y) / scale], axis=-1)

    out = []
    for score, box, points in kept:
        corners = to_frame(box.reshape(2, 2)).reshape(4)
        corners[0::2] = np.clip(corners[0::2], 0, width)  # boxes end inside the frame
        corners[1::2] = np.clip(corners[1::2], 0, height)
        out.append((score, corners.tolist(), to_frame(points)))
    return out


def iou(a, b) -> float:
    x1, y1, x2, y2 = max(a[0], b[0]), max(a[1], b[1]), min(a[2], b[2]), min(a[3], b[3])
    inter = max(0.0, x2 - x1) * max(0.0, y2 - y1)
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


# ---------------------------------------------------------------- the test


def test_reference_anchors_agree_with_mediapipes_count():
    assert reference_anchors().shape == (896, 4)


@pytest.mark.slow
def test_blazeface_style_ssd_with_generated_anchors_matches_the_reference_through_deploy_local(tmp_path, video_path):
    folder = tmp_path / "faces"
    folder.mkdir()
    shutil.copyfile(video_path, folder / "vtest.avi")
    model = blazeface_style_model(folder / "face.onnx")
    (folder / "faces.yaml").write_text(PIPELINE)
    state, reports = tmp_path / "state", tmp_path / "reports"
    env = {**os.environ, "SDK_STATE_DIR": str(state), "COLUMNS": "200"}
    done = subprocess.run(
        [sys.executable, "-c", "from tools.cli import main; main()", "deploy", "--target", "local", str(folder / "faces.yaml")]
        + ["--frames", str(FRAMES), "--report-dir", str(reports)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode in (0, 4), done.stdout + done.stderr  # PASS, or INCONCLUSIVE on too few frames for a verdict
    lines = [json.loads(line) for line in (reports / "detections.jsonl").read_text().splitlines()]
    assert [line["frame"] for line in lines] == list(range(FRAMES))

    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    anchors = reference_anchors()
    capture = cv2.VideoCapture(str(video_path))
    true_positives = theirs_total = ours_total = 0
    worst_score = worst_box = worst_point = 0.0
    counts = set()
    for line in lines:
        ok, bgr = capture.read()
        assert ok
        theirs = reference_detections(session, bgr, anchors)
        ours = line["detections"]
        counts.add(len(theirs))
        theirs_total += len(theirs)
        ours_total += len(ours)
        used: set[int] = set()
        for score, box, points in theirs:
            candidates = [(iou(box, d["box"]), k) for k, d in enumerate(ours) if k not in used]
            best, k = max(candidates, default=(0.0, -1))
            if best < 0.5:
                continue
            used.add(k)
            true_positives += 1
            mine = ours[k]
            assert mine["label"] == "face" and len(mine["keypoints"]) == 6
            worst_score = max(worst_score, abs(mine["score"] - score))
            worst_box = max(worst_box, float(np.abs(np.array(mine["box"]) - box).max()))
            worst_point = max(worst_point, float(np.abs(np.array(mine["keypoints"]) - points).max()))
    capture.release()
    recall, precision = true_positives / theirs_total, true_positives / ours_total
    print(
        f"{theirs_total} reference detections, {ours_total} ours, {true_positives} matched; "
        f"worst score {worst_score:.5f}, box {worst_box:.3f} px, keypoint {worst_point:.3f} px"
    )
    assert theirs_total >= 4 * FRAMES and len(counts) > 1, "too few, or too constant, detections for the test to prove much"
    assert recall >= 0.97 and precision >= 0.97, (recall, precision)
    assert worst_score <= 0.03 and worst_box <= 1.0 and worst_point <= 1.0
