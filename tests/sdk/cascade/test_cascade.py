"""`cascade:` on a real published pair: PaddleOCR's text detector (DBNet, decoded by a plug-in) finds text lines, its
CTC recogniser reads each crop (all crops of a frame in one batch); both ONNX files and the character list ship in
rapidocr-onnxruntime (Apache-2.0). The reference is rapidocr's own pipeline on the same frames."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import onnx
import pytest

from sdk.cascade import crop_rect
from sdk.errors import ConfigError
from sdk.spec.cascade import CascadeCrop
from sdk.spec.loader import load_pipeline
from tests.integration.mediapipe_reference import deploy_local

DB_PLUGIN = '''\
import cv2
import numpy as np


def decode(outputs, geometry, options):
    """DBNet's text probability map -> text line boxes (PaddleOCR's DBPostProcess, axis-aligned): threshold,
    contours, each box grown by area * unclip_ratio / perimeter; score = the mean probability inside."""
    prob = outputs[options["output"]][0, 0]
    mask = (prob > options["thresh"]).astype(np.uint8)
    contours, _ = cv2.findContours(mask, cv2.RETR_LIST, cv2.CHAIN_APPROX_SIMPLE)
    boxes, scores = [], []
    for contour in contours:
        x, y, w, h = cv2.boundingRect(contour)
        if min(w, h) < 3:
            continue
        score = float(prob[y : y + h, x : x + w][mask[y : y + h, x : x + w] > 0].mean())
        grow = w * h * options["unclip_ratio"] / (2 * (w + h))
        boxes.append([x - grow, y - grow, x + w + grow, y + h + grow])
        scores.append(score)
    return {"boxes": np.array(boxes, np.float32).reshape(-1, 4), "scores": scores, "class_ids": [0] * len(scores)}
'''

PIPELINE = """\
version: 1
name: ocr
source:
  uri: images://frames
preprocess:
  resize: {width: 640, height: 480}
  color: bgr
  normalize: {scale: 0.00392156862745098, mean: [0.5, 0.5, 0.5], std: [0.5, 0.5, 0.5]}
model:
  path: det.onnx
  prepare: {inputs: {x: [1, 3, 480, 640]}, outputs: [sigmoid_0.tmp_0]}
  threads: 2
postprocess:
  decoder:
    kind: python
    entry: db:decode
    path: plugins
    options: {output: sigmoid_0.tmp_0, thresh: 0.3, unclip_ratio: 1.6}
    nms: false
  classes: [text]
  score_threshold: 0.5
cascade:
  - name: text
    model: {path: rec.onnx, threads: 2}
    takes: {classes: [text], min_score: 0.5, max_per_frame: 8}
    crop: {padding: 0.0, min_size: 4}
    preprocess:
      resize: {width: 320, height: 48, mode: letterbox, pad_value: 127}
      color: bgr
      normalize: {scale: 0.00392156862745098, mean: [0.5, 0.5, 0.5], std: [0.5, 0.5, 0.5]}
    decoder: {kind: ctc, characters: characters.txt, space: true}
budgets:
  end_to_end: {p50_ms: 60000}
  cascade: {text: {p50_ms: 60000}}
"""

LINES = ("PERCEPTION 2026", "ORIN SDK", "LANE 42")


def frames() -> list[np.ndarray]:
    out = []
    for i in range(5):
        image = np.full((480, 640, 3), 255, np.uint8)
        for k, text in enumerate(LINES):
            cv2.putText(image, text, (40 + 20 * i, 100 + 130 * k), cv2.FONT_HERSHEY_SIMPLEX, 1.6, (20, 20, 20), 3, cv2.LINE_AA)
        out.append(image)
    return out


def _models() -> Path:
    rapidocr = pytest.importorskip("rapidocr_onnxruntime", reason="PaddleOCR's models: pip install --no-deps -r tests/reference-packages.txt")
    return Path(rapidocr.__file__).parent / "models"


def ocr_folder(tmp_path: Path) -> Path:
    models = _models()
    folder = tmp_path / "ocr"
    (folder / "frames").mkdir(parents=True)
    (folder / "plugins").mkdir()
    (folder / "plugins" / "db.py").write_text(DB_PLUGIN)
    (folder / "det.onnx").write_bytes((models / "ch_PP-OCRv4_det_infer.onnx").read_bytes())
    rec = models / "ch_PP-OCRv4_rec_infer.onnx"
    (folder / "rec.onnx").write_bytes(rec.read_bytes())
    characters = {p.key: p.value for p in onnx.load(str(rec), load_external_data=False).metadata_props}["character"]
    (folder / "characters.txt").write_text(characters + ("" if characters.endswith("\n") else "\n"), encoding="utf-8")
    for i, image in enumerate(frames()):
        cv2.imwrite(str(folder / "frames" / f"{i:03d}.png"), image)
    (folder / "ocr.yaml").write_text(PIPELINE)
    return folder


def test_crop_rectangles():
    assert crop_rect([10, 20, 30, 60], CascadeCrop(), 100, 100) == (10, 20, 30, 60)
    assert crop_rect([10, 20, 30, 60], CascadeCrop(square=True), 100, 100) == (0, 20, 40, 60)
    assert crop_rect([10, 20, 30, 60], CascadeCrop(padding=0.5), 100, 100) == (0, 0, 40, 80)
    assert crop_rect([10, 20, 12, 60], CascadeCrop(min_size=4), 100, 100) is None
    assert crop_rect([95, 95, 120, 130], CascadeCrop(), 100, 100) == (95, 95, 100, 100)


def test_a_step_is_validated_at_load(tmp_path):
    folder = ocr_folder(tmp_path)
    assert load_pipeline(folder / "ocr.yaml").spec.cascade[0].decoder.kind == "ctc"
    (folder / "ocr.yaml").write_text(PIPELINE.replace("kind: ctc, characters: characters.txt", "kind: ctc, characters: missing.txt"))
    with pytest.raises(ConfigError, match=r"cascade\[0\]\.decoder\.characters: .*missing.txt does not exist"):
        load_pipeline(folder / "ocr.yaml")
    (folder / "ocr.yaml").write_text(PIPELINE.replace("cascade: {text:", "cascade: {txt:"))
    with pytest.raises(ConfigError, match=r"budgets\.cascade\.txt: 'txt' is not a cascade step; allowed: text"):
        load_pipeline(folder / "ocr.yaml")
    (folder / "ocr.yaml").write_text(PIPELINE.replace("max_per_frame: 8", "max_per_frame: 1000"))
    with pytest.raises(ConfigError, match=r"cascade\[0\]\.takes\.max_per_frame"):
        load_pipeline(folder / "ocr.yaml")


@pytest.mark.slow
def test_paddleocr_detector_and_recogniser_read_the_lines_as_rapidocr_does(tmp_path):
    RapidOCR = pytest.importorskip(  # noqa: N806 - the reference's class
        "rapidocr_onnxruntime", reason="the reference OCR: pip install --no-deps -r tests/reference-packages.txt"
    ).RapidOCR

    folder = ocr_folder(tmp_path)
    lines = deploy_local(folder / "ocr.yaml", 5, tmp_path / "state", tmp_path / "reports")
    engine = RapidOCR()
    for image, line in zip(frames(), lines, strict=True):
        theirs, _ = engine(image)
        # Spaces compared out: rapidocr joins words it reads apart, and our centred letterbox leaves a margin it reads as one.
        expected = sorted(text.replace(" ", "") for _, text, _ in theirs)
        ours = sorted(d["secondary"]["text"]["text"].replace(" ", "") for d in line["detections"] if "secondary" in d)
        assert ours == expected and len(ours) == len(LINES), (ours, expected)
        assert all(d["secondary"]["text"]["score"] > 0.8 for d in line["detections"]), line
    import json

    report = json.loads((tmp_path / "reports" / "report.json").read_text())
    assert set(report["cascade"]) == {"text"} and report["cascade"]["text"]["p50_ms"] > 0
    (check,) = [c for c in report["checks"] if c["name"].startswith("cascade.")]
    assert check["name"] == "cascade.text.p50_ms" and check["measured"] > 0, check
