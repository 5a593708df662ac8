"""`kind: classify` and `kind: segment` on real published models (PaddleOCR's, shipped by rapidocr-onnxruntime,
Apache-2.0) run by the device's pipeline runner on the model as the host prepares it for a release, against references
computed without the SDK: the classifier's own package's postprocessing (rapidocr's ClsPostProcess), and for the
segmenter rapidocr's own binarisation (DBPostProcess: probability > 0.3) mapped to the frame by a plain per-pixel
reference script. The runner runs in this process: what the decoders find is the subject here, and the deploy path
around the runner (staging, trial, health check, the runtime process) is the same for every kind and taken through
`deploy --target local` and the real `sdk-deploy` process by tests/tools/models/ (test_init_pipeline,
test_still_and_short_sources)."""

from __future__ import annotations

import json

import cv2
import numpy as np
import onnxruntime as ort
import pytest

from tests.integration.real_models import document_frame, pinned, rapidocr_model, text_image


def run_here(pipeline_path, frames: int, state, reports, monkeypatch) -> tuple:
    """The pipeline file run by the device's runner in this process for `frames` frames: (its result, detections.jsonl's
    lines); the sinks write under `reports` as a deploy's run does."""
    from sdk.runtime.runner import PipelineRunner
    from sdk.spec import load_pipeline
    from tools.models.prepare import PrepareModel

    monkeypatch.setenv("SDK_STATE_DIR", str(state))
    pipeline = load_pipeline(pipeline_path)
    result = PipelineRunner(pipeline, PrepareModel(pipeline, state / "cache")(), reports, max_frames=frames).run()
    return result, [json.loads(line) for line in (reports / "detections.jsonl").read_text().splitlines()]


pytest.importorskip("rapidocr_onnxruntime", reason="rapidocr-onnxruntime ships the models: pip install --no-deps -r tests/reference-packages.txt")

CLASSIFY = """\
version: 1
name: text-orientation
source: {uri: "images://frames"}
preprocess:
  resize: {width: 192, height: 48, mode: stretch}
  color: bgr                 # rapidocr feeds the BGR image as read
  normalize: {scale: 0.00784313725490196, mean: [1.0, 1.0, 1.0]}   # (x / 255 - 0.5) / 0.5
  layout: nchw
  dtype: float32
model: {path: cls.onnx, threads: 1}
postprocess:
  decoder: {kind: classify, output: "save_infer_model/scale_0.tmp_1", activation: none, top_k: 2, labels: orientation.txt}
  score_threshold: 0.0
budgets:
  end_to_end: {p50_ms: 60000, max_ms: 60000}
"""

SEGMENT = """\
version: 1
name: text-segments
source: {uri: "images://frames"}
preprocess:
  resize: {width: 320, height: 192, mode: letterbox, pad_value: 0}
  color: bgr
  normalize: {scale: 0.00784313725490196, mean: [1.0, 1.0, 1.0]}
  layout: nchw
  dtype: float32
model: {path: det.onnx, threads: 1}
postprocess:
  decoder: {kind: segment, output: sigmoid_0.tmp_0, threshold: 0.3}   # DBPostProcess's thresh
  classes: [background, text]
sinks:
  - {kind: jsonl}
  - {kind: mask, path: masks}
budgets:
  end_to_end: {p50_ms: 60000, max_ms: 60000}
"""


@pytest.mark.slow
def test_real_orientation_classifier_top_k_matches_its_own_package(tmp_path, monkeypatch):
    from rapidocr_onnxruntime.ch_ppocr_cls.utils import ClsPostProcess

    folder = tmp_path / "cls"
    (folder / "frames").mkdir(parents=True)
    model = pinned(rapidocr_model("ch_ppocr_mobile_v2.0_cls_infer.onnx"), folder / "cls.onnx", [1, 3, 48, 192], [1, 2])
    (folder / "orientation.txt").write_text("0\n180\n")
    words = ["PERCEPTION", "deploy", "Orin NX 16GB", "lane closed", "EXIT 12", "speed 80"]
    frames = [text_image(words[i % len(words)], 384, 96, i, flipped=bool(i % 2)) for i in range(12)]  # 4:1, as the model's 192 x 48
    for i, frame in enumerate(frames):
        cv2.imwrite(str(folder / "frames" / f"{i:03d}.png"), frame)
    (folder / "cls.yaml").write_text(CLASSIFY)
    result, lines = run_here(folder / "cls.yaml", len(frames), tmp_path / "state", tmp_path / "reports", monkeypatch)
    assert result.postprocess.startswith("classify, 2 classes, top 2"), result.postprocess  # as the run's report.json says it

    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    post = ClsPostProcess(["0", "180"])
    found = set()
    for frame, line in zip(frames, lines, strict=True):
        # rapidocr's own preprocessing for a 4:1 crop (resize_norm_img: no padding) and its own postprocessing
        x = cv2.resize(frame, (192, 48)).astype(np.float32).transpose(2, 0, 1) / 255
        probs = session.run(None, {"x": ((x - 0.5) / 0.5)[None]})[0]
        ((label, score),) = post(probs)
        ours = line["classes"]
        assert line["detections"] == [] and len(ours) == 2 and ours[0]["score"] >= ours[1]["score"]
        assert ours[0]["label"] == label and abs(ours[0]["score"] - float(score)) <= 0.01, (line, label, score)
        assert abs(sum(c["score"] for c in ours) - 1.0) <= 0.001  # both classes of a softmax
        found.add(label)
    assert found == {"0", "180"}, "the frames show text both ways up: the model should say so"


def reference_mask(probability: np.ndarray, width: int, height: int, net_w: int, net_h: int) -> np.ndarray:
    """The network's binarised map in frame pixels, written per pixel: each frame pixel's centre, scaled into the
    letterboxed content, names the network pixel it reads."""
    scale = min(net_w / width, net_h / height)
    content_w, content_h = round(width * scale), round(height * scale)
    pad_x, pad_y = (net_w - content_w) // 2, (net_h - content_h) // 2
    cols = np.minimum(np.floor((np.arange(width) + 0.5) * content_w / width).astype(int), content_w - 1) + pad_x
    rows = np.minimum(np.floor((np.arange(height) + 0.5) * content_h / height).astype(int), content_h - 1) + pad_y
    return (probability > 0.3)[rows[:, None], cols[None, :]].astype(np.uint8)


def reference_input(frame: np.ndarray, net_w: int, net_h: int) -> np.ndarray:
    height, width = frame.shape[:2]
    scale = min(net_w / width, net_h / height)
    content_w, content_h = round(width * scale), round(height * scale)
    pad_x, pad_y = (net_w - content_w) // 2, (net_h - content_h) // 2
    canvas = np.zeros((net_h, net_w, 3), np.float32)  # pad value 0
    canvas[pad_y : pad_y + content_h, pad_x : pad_x + content_w] = cv2.resize(frame, (content_w, content_h)).astype(np.float32)
    return ((canvas / 255 - 0.5) / 0.5).transpose(2, 0, 1)[None]


@pytest.mark.slow
def test_real_text_segmenter_masks_match_the_reference_through_the_letterbox(tmp_path, monkeypatch):
    from rapidocr_onnxruntime.ch_ppocr_det.utils import DBPostProcess

    folder = tmp_path / "det"
    (folder / "frames").mkdir(parents=True)
    model = pinned(rapidocr_model("ch_PP-OCRv4_det_infer.onnx"), folder / "det.onnx", [1, 3, 192, 320], [1, 1, 192, 320])
    frames = [document_frame(i) for i in range(6)]
    for i, frame in enumerate(frames):
        cv2.imwrite(str(folder / "frames" / f"{i:03d}.png"), frame)
    (folder / "det.yaml").write_text(SEGMENT)
    _, lines = run_here(folder / "det.yaml", len(frames), tmp_path / "state", tmp_path / "reports", monkeypatch)

    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    db = DBPostProcess(thresh=0.3, box_thresh=0.5, unclip_ratio=1.6, use_dilation=False)
    for i, (frame, line) in enumerate(zip(frames, lines, strict=True)):
        probability = session.run(None, {"x": reference_input(frame, 320, 192)})[0]
        expected = reference_mask(probability[0, 0], 640, 360, 320, 192)
        assert line["mask"] == f"masks/{i:06d}.png"
        ours = cv2.imread(str(tmp_path / "reports" / line["mask"]), cv2.IMREAD_UNCHANGED)
        assert ours.shape == (360, 640) and ours.dtype == np.uint8
        differ = np.count_nonzero(ours != expected) / expected.size
        text = int(expected.sum())
        assert text > 2000, "the real detector should mark the text"
        # Pixels whose probability sits on the threshold may go either way (the two resizes differ in rounding).
        assert differ <= 0.002, (i, differ)
        assert abs(line["pixels"]["text"] - text) <= 0.01 * text and line["pixels"]["background"] + line["pixels"]["text"] == 640 * 360
        # The package's own postprocessing finds its text boxes inside our mask.
        boxes, _ = db(probability, (360, 640))
        assert len(boxes) >= 3
        for box in boxes:
            x1, y1 = np.floor(box.min(axis=0)).astype(int)
            x2, y2 = np.ceil(box.max(axis=0)).astype(int)
            assert ours[max(0, y1) : y2, max(0, x1) : x2].any(), box
