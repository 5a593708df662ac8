"""`kind: db`: a DB text detector's probability map -> text boxes, as PaddleOCR's DBPostProcess makes them. On a made
map (exact expectations), and on the real PaddleOCR detector's map of real rendered text against rapidocr's own
DBPostProcess (a copy of PaddleOCR's; a reference package, skipped without it)."""

from __future__ import annotations

import numpy as np
import pytest

from sdk.errors import ModelError
from sdk.geometry import ResizeGeometry
from sdk.postprocess import create_postprocessor
from sdk.spec.schema import Postprocess, Resize

SETTINGS = {"threshold": 0.3, "unclip_ratio": 1.5}


def decoder(probability: np.ndarray, score: float = 0.6, **settings):
    spec = Postprocess.model_validate(
        {"decoder": {"kind": "db", "output": "map", **SETTINGS, **settings}, "classes": ["text"], "score_threshold": score}
    )
    return create_postprocessor(spec, {"map": probability}, probability.shape[:1:-1], {})


def test_each_text_region_becomes_its_grown_rectangle_with_its_corners_and_mean_probability():
    probability = np.zeros((1, 1, 64, 128), np.float32)
    probability[0, 0, 10:20, 10:70] = 0.9  # a 60 x 10 line
    probability[0, 0, 40:50, 90:120] = 0.5  # a fainter 30 x 10 word: below the box score 0.6
    geometry = ResizeGeometry.plan(256, 128, Resize(width=128, height=64))  # the frame is twice the network input
    (line,) = list(decoder(probability)(geometry))
    # minAreaRect of the pixel centres is 59 x 9; grown by 59 * 9 * 1.5 / (2 * 68) = 5.857 on each side
    grow = 59 * 9 * 1.5 / (2 * 68)
    expected = np.array([10 - grow, 10 - grow, 69 + grow, 19 + grow]) * 2
    assert line.label == "text" and line.score == pytest.approx(0.9, abs=1e-6)
    assert line.box == pytest.approx(list(expected), abs=0.01)
    corners = [(expected[0], expected[1]), (expected[2], expected[1]), (expected[2], expected[3]), (expected[0], expected[3])]
    assert np.allclose(line.keypoints, corners, atol=0.01), line.keypoints
    assert len(decoder(probability, score=0.4)(geometry)) == 2


def test_a_map_that_is_not_one_channel_is_refused_naming_the_shape():
    with pytest.raises(ModelError, match=r"'map' is \[1, 2, 8, 8\], expected \[1, 1, H, W\]"):
        decoder(np.zeros((1, 2, 8, 8), np.float32))


def test_the_real_paddleocr_detector_boxes_match_paddleocrs_db_postprocess():
    import cv2
    import onnxruntime as ort

    rapidocr = pytest.importorskip("rapidocr_onnxruntime", reason="the reference: pip install --no-deps -r tests/reference-packages.txt")
    from pathlib import Path

    from rapidocr_onnxruntime.ch_ppocr_det.utils import DBPostProcess

    from tests.integration.real_models import document_frame

    session = ort.InferenceSession(str(Path(rapidocr.__file__).parent / "models" / "ch_PP-OCRv4_det_infer.onnx"), providers=["CPUExecutionProvider"])
    theirs_db = DBPostProcess(thresh=0.3, box_thresh=0.6, unclip_ratio=1.5, use_dilation=False, score_mode="fast")
    compared = 0
    for seed in range(3):
        frame = document_frame(seed)  # 640 x 360, run at 640 x 352 (multiples of 32) as PaddleOCR resizes it
        net = cv2.resize(frame, (640, 352)).astype(np.float32) / 255.0
        net = ((net - [0.485, 0.456, 0.406]) / [0.229, 0.224, 0.225]).transpose(2, 0, 1)[None].astype(np.float32)
        (probability,) = session.run(None, {"x": net})
        theirs, scores = theirs_db(probability, (360, 640))
        ours = list(decoder(probability)(ResizeGeometry.plan(640, 360, Resize(width=640, height=352))))
        assert len(ours) == len(theirs) >= 3, (len(ours), len(theirs))
        for quad, score in zip(theirs, scores, strict=True):
            # Theirs: grown with pyclipper on whole pixels, corners rounded; ours: exact. The same region, within 1.5 pixels.
            near = [d for d in ours if abs(d.score - score) < 1e-4 and _same_corners(d.keypoints, quad, 1.5)]
            assert len(near) == 1, (quad, score, [(d.score, d.keypoints) for d in ours])
            compared += 1
    assert compared >= 9


def _same_corners(ours, quad, px: float) -> bool:
    return all(min(np.hypot(x - qx, y - qy) for x, y in ours) <= px for qx, qy in quad)
