"""`cascade:` on a real published pair: PaddleOCR's text detector (DBNet, `kind: db`) finds text lines, its CTC
recogniser reads each crop (all crops of a frame in one batch); both ONNX files and the character list ship in
rapidocr-onnxruntime (Apache-2.0). The pipeline is the one `sdk init det.onnx --cascade rec.onnx` writes; the reference
is rapidocr's own pipeline on the same frames."""

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
  decoder: {kind: db, output: sigmoid_0.tmp_0}
  classes: [text]
  score_threshold: 0.6
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
FRAMES = 3  # the lines at three places: each frame costs about 2 CPU-s (ours and the reference)


def frames() -> list[np.ndarray]:
    out = []
    for i in range(FRAMES):
        image = np.full((480, 640, 3), 255, np.uint8)
        for k, text in enumerate(LINES):
            cv2.putText(image, text, (40 + 40 * i, 100 + 130 * k), cv2.FONT_HERSHEY_SIMPLEX, 1.6, (20, 20, 20), 3, cv2.LINE_AA)
        out.append(image)
    return out


def _models() -> Path:
    rapidocr = pytest.importorskip("rapidocr_onnxruntime", reason="PaddleOCR's models: pip install --no-deps -r tests/reference-packages.txt")
    return Path(rapidocr.__file__).parent / "models"


def ocr_folder(tmp_path: Path) -> Path:
    models = _models()
    folder = tmp_path / "ocr"
    (folder / "frames").mkdir(parents=True)
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

    from tools.models.init_pipeline import init_pipeline

    folder = ocr_folder(tmp_path)
    (folder / "characters.txt").unlink()  # written by sdk init from the recogniser's own metadata
    written = init_pipeline(folder / "det.onnx", source="images://frames", output=folder / "det.yaml", cascade=[folder / "rec.onnx"])
    assert written.fill_in == [] and written.recognised.family == "text-detector"
    spec = load_pipeline(written.path).spec
    assert spec.postprocess.decoder.kind == "db" and (spec.preprocess.resize.width, spec.preprocess.resize.height) == (640, 480)
    (step,) = spec.cascade
    assert (step.name, step.decoder.kind, step.decoder.characters, step.decoder.space) == ("text", "ctc", "rec.characters.txt", True)
    lines = deploy_local(written.path, FRAMES, tmp_path / "state", tmp_path / "reports")
    # One ONNX Runtime thread: rapidocr's default (every core, spinning) took twice the CPU on a busy 2-core machine for
    # the same results.
    engine = RapidOCR(intra_op_num_threads=1, inter_op_num_threads=1)
    for image, line in zip(frames(), lines, strict=True):
        theirs, _ = engine(image)
        # Spaces compared out: rapidocr joins words it reads apart, and our centred letterbox leaves a margin it reads as one.
        expected = sorted(text.replace(" ", "") for _, text, _ in theirs)
        ours = sorted(d["secondary"]["text"]["text"].replace(" ", "") for d in line["detections"] if "secondary" in d)
        assert ours == expected and len(ours) == len(LINES), (ours, expected)
        assert all(d["secondary"]["text"]["score"] > 0.8 for d in line["detections"]), line
    import json

    report = json.loads((tmp_path / "reports" / "report.json").read_text())
    assert set(report["cascade"]) == {"text"}  # its times: none measured past the written 10 warm-up frames
