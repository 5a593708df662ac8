"""A BlazeFace-style SSD end to end through `deploy --target local`, against a reference written here from MediaPipe's
documented semantics (SsdAnchorsCalculator, TensorsToDetectionsCalculator), in plain numpy, without the SDK.

The model is a real ONNX graph built here with BlazeFace's interface: NHWC float input [1, 128, 128, 3], boxes
[1, 896, 16] (x, y, w, h, six keypoints, in input pixels) and scores [1, 896, 1]. Its outputs follow the frames
(8 x 8 and 16 x 16 average pools under 1 x 1 convolutions with seeded weights) around biases placed to put faces,
some of them twice (neighbouring anchors) so that NMS has work. It runs on the example's real video.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import cv2
import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper, save

from tests.integration.mediapipe_reference import SIZE, compare, deploy_local, reference_anchors

FRAMES = 40

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


def test_reference_anchors_agree_with_mediapipes_count():
    assert reference_anchors().shape == (896, 4)


@pytest.mark.slow
def test_blazeface_style_ssd_with_generated_anchors_matches_the_reference_through_deploy_local(tmp_path, video_path):
    folder = tmp_path / "faces"
    folder.mkdir()
    shutil.copyfile(video_path, folder / "vtest.avi")
    model = blazeface_style_model(folder / "face.onnx")
    (folder / "faces.yaml").write_text(PIPELINE)
    lines = deploy_local(folder / "faces.yaml", FRAMES, tmp_path / "state", tmp_path / "reports")
    assert [line["frame"] for line in lines] == list(range(FRAMES))
    assert all(len(d["keypoints"]) == 6 and d["label"] == "face" for line in lines for d in line["detections"])

    capture = cv2.VideoCapture(str(video_path))
    frames = [capture.read()[1] for _ in range(FRAMES)]
    capture.release()
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    stats = compare(frames, lines, session, reference_anchors())
    print({k: v for k, v in stats.items() if k != "counts"})
    assert stats["reference"] >= 4 * FRAMES and len(stats["counts"]) > 1, "too few, or too constant, detections for the test to prove much"
    assert stats["recall"] >= 0.97 and stats["precision"] >= 0.97, stats
    assert stats["score"] <= 0.03 and stats["box"] <= 1.0 and stats["keypoint"] <= 1.0, stats
