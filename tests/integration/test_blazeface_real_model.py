"""The real MediaPipe BlazeFace (short range, ONNX from a package registry, Apache-2.0; tests/integration/assets/PROVENANCE.md)
through `deploy --target local` on frames made from a public-domain portrait: the pipeline file copies the model's
SsdAnchorsCalculator options, and its detections and keypoints match the plain-numpy MediaPipe reference."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from tests.integration.mediapipe_reference import compare, deploy_local, reference_anchors

ASSETS = Path(__file__).resolve().parent / "assets"
FRAMES = 24
NAMES = ("input:0", "regressors", "classificators")

PIPELINE = """\
version: 1
name: blazeface
source:
  uri: images://frames
preprocess:
  resize: {width: 128, height: 128, mode: letterbox, pad_value: 0}
  color: rgb
  normalize: {scale: 0.00784313725490196, mean: [1.0, 1.0, 1.0]}   # x / 127.5 - 1, as MediaPipe feeds BlazeFace
  layout: nhwc
  dtype: float32
model:
  path: blazeface.onnx
  threads: 1
postprocess:
  decoder:
    kind: ssd
    box_encodings: regressors
    class_logits: classificators
    anchors:
      generate:          # face_detection_short_range.pbtxt's SsdAnchorsCalculator, copied
        num_layers: 4
        min_scale: 0.1484375
        max_scale: 0.75
        input_size_height: 128
        input_size_width: 128
        anchor_offset_x: 0.5
        anchor_offset_y: 0.5
        strides: [8, 16, 16, 16]
        aspect_ratios: [1.0]
        fixed_anchor_size: true
    box_layout: xywh      # reverse_output_order: true
    box_size: linear      # no apply_exponential_on_box_size
    scale_factors: [128, 128, 128, 128]
    keypoints: 6
    background_class: false
    clip_boxes: false
  classes: [face]
  score_threshold: 0.5
  iou_threshold: 0.3
budgets:
  end_to_end: {p50_ms: 60000, max_ms: 60000}
"""


def one_box_and_one_score_tensor(source: Path, target: Path) -> Path:
    """The model with its two grids joined (512 + 384 anchors, MediaPipe's order): the graph is otherwise unchanged."""
    model = onnx.load(str(source))
    graph = model.graph
    graph.node.append(helper.make_node("Concat", ["Identity_2:0", "Identity_3:0"], ["regressors"], axis=1))
    graph.node.append(helper.make_node("Concat", ["Identity:0", "Identity_1:0"], ["classificators"], axis=1))
    del graph.output[:]
    graph.output.extend(
        [
            helper.make_tensor_value_info("regressors", TensorProto.FLOAT, [1, 896, 16]),
            helper.make_tensor_value_info("classificators", TensorProto.FLOAT, [1, 896, 1]),
        ]
    )
    onnx.checker.check_model(model)
    onnx.save(model, str(target))
    return target


def portrait_frames(portrait: np.ndarray, count: int, width: int = 320, height: int = 240) -> list[np.ndarray]:
    """Frames of a noisy background with the portrait's head at several sizes and places, mirrored every other frame,
    and a second head in every fourth."""
    rng = np.random.default_rng(0)
    head = portrait[0:150, 40:190]
    frames = []
    for i in range(count):
        frame = (np.full((height, width, 3), 90) + rng.integers(0, 40, (height, width, 3))).astype(np.uint8)
        size = int(110 + 120 * (i % 6) / 5)
        image = cv2.resize(head, (size, size), interpolation=cv2.INTER_AREA)
        if i % 2:
            image = image[:, ::-1]
        x = int((width - size) * ((i * 7) % 11) / 10)
        y = int((height - size) * ((i * 5) % 7) / 6) if height > size else 0
        frame[y : y + min(size, height - y), x : x + size] = image[: height - y]
        if i % 4 == 3:
            second = cv2.resize(head, (130, 130), interpolation=cv2.INTER_AREA)
            x2 = 0 if x > width / 2 else width - 130
            frame[height - 130 :, x2 : x2 + 130] = second
        frames.append(frame)
    return frames


@pytest.mark.slow
def test_real_blazeface_with_generated_anchors_matches_the_reference_through_deploy_local(tmp_path):
    folder = tmp_path / "blazeface"
    (folder / "frames").mkdir(parents=True)
    model = one_box_and_one_score_tensor(ASSETS / "blazeface_front_128.onnx", folder / "blazeface.onnx")
    frames = portrait_frames(cv2.imread(str(ASSETS / "astronaut_256.jpg")), FRAMES)
    for i, frame in enumerate(frames):
        cv2.imwrite(str(folder / "frames" / f"{i:03d}.png"), frame)  # lossless: both sides read the same pixels
    (folder / "blazeface.yaml").write_text(PIPELINE)
    lines = deploy_local(folder / "blazeface.yaml", FRAMES, tmp_path / "state", tmp_path / "reports")
    assert [line["frame"] for line in lines] == list(range(FRAMES))

    quiet = ort.SessionOptions()
    quiet.log_severity_level = 3  # the converted graph carries unused initializers; ONNX Runtime warns about each
    session = ort.InferenceSession(str(model), quiet, providers=["CPUExecutionProvider"])
    stats = compare(frames, lines, session, reference_anchors(), NAMES, band=0.01)
    print({k: v for k, v in stats.items() if k != "counts"})
    assert stats["matched"] >= FRAMES and max(stats["counts"]) >= 2, "the real model should find the faces, two in some frames"
    assert stats["recall"] >= 0.97 and stats["precision"] >= 0.97, stats
    assert stats["score"] <= 0.03 and stats["box"] <= 1.0 and stats["keypoint"] <= 1.0, stats
    # The keypoints land on the face: the first two (the eyes, in MediaPipe's order) inside the box, in its upper half.
    for line in lines:
        for d in line["detections"]:
            x1, y1, x2, y2 = d["box"]
            for x, y in d["keypoints"][:2]:
                assert x1 <= x <= x2 and y1 <= y <= (y1 + y2) / 2, d
