"""The sinks with classify and segment results: JSONL lines carry `classes` or `mask` + `pixels` (decision 0502),
the mask sink writes lossless PNGs of class indices (and keeps the newest `keep`), the video sink blends the mask."""

from __future__ import annotations

import json

import cv2
import numpy as np

from sdk.frame import Frame
from sdk.geometry import ResizeGeometry
from sdk.postprocess import create_postprocessor
from sdk.sinks import create_sinks
from sdk.spec.schema import JsonlSink, MaskSink, Postprocess, Resize, VideoSink


def segmenter():
    maps = np.zeros((1, 3, 16, 16), np.float32)
    maps[0, 1, :8] = 1.0  # top half: class 1
    maps[0, 2, 8:, 8:] = 1.0  # bottom right: class 2
    spec = Postprocess.model_validate({"decoder": {"kind": "segment", "output": "o"}, "classes": ["road", "car", "person"]})
    return create_postprocessor(spec, {"o": maps}, (16, 16), {}), ResizeGeometry.plan(64, 32, Resize(width=16, height=16, mode="letterbox"))


def test_segment_lines_name_the_mask_file_and_count_pixels(tmp_path):
    post, geometry = segmenter()
    specs = (
        JsonlSink(kind="jsonl"),
        MaskSink(kind="mask", path="masks", every=2, keep=2),
        VideoSink(kind="video", path="overlay.avi", fourcc="MJPG"),
    )
    image = np.full((32, 64, 3), 100, np.uint8)
    with create_sinks(specs, tmp_path) as sinks:
        for index in range(6):
            sinks(Frame(index, 1000 + index, image), post(geometry))
    lines = [json.loads(line) for line in (tmp_path / "detections.jsonl").read_text().splitlines()]
    assert [line["mask"] for line in lines] == ["masks/000000.png", None, "masks/000002.png", None, "masks/000004.png", None]
    assert lines[0]["detections"] == [] and lines[0]["pixels"] == {"road": 32 * 16, "car": 64 * 16, "person": 32 * 16}  # ties: the first class
    assert sorted(p.name for p in (tmp_path / "masks").iterdir()) == ["000002.png", "000004.png"]  # keep: 2
    mask = cv2.imread(str(tmp_path / "masks" / "000004.png"), cv2.IMREAD_UNCHANGED)
    assert mask.dtype == np.uint8 and mask.shape == (32, 64)
    assert (mask[:16] == 1).all() and (mask[16:, 32:] == 2).all() and (mask[16:, :32] == 0).all()
    capture = cv2.VideoCapture(str(tmp_path / "overlay.avi"))
    ok, frame = capture.read()
    capture.release()
    assert ok and abs(int(frame[28, 10].mean()) - 100) < 12 and abs(int(frame[4, 10].mean()) - 100) > 15  # blended where a class is


def test_classify_lines_carry_the_top_classes(tmp_path):
    spec = Postprocess.model_validate({"decoder": {"kind": "classify", "output": "o", "top_k": 2}, "classes": ["a", "b", "c"], "score_threshold": 0})
    post = create_postprocessor(spec, {"o": np.array([[0.0, 2.0, 1.0]], np.float32)}, (8, 8), {})
    with create_sinks((JsonlSink(kind="jsonl"),), tmp_path) as sinks:
        sinks(Frame(0, 1, np.zeros((8, 8, 3), np.uint8)), post(None))
    (line,) = [json.loads(line) for line in (tmp_path / "detections.jsonl").read_text().splitlines()]
    assert line["detections"] == [] and [c["label"] for c in line["classes"]] == ["b", "c"]
    assert abs(line["classes"][0]["score"] - float(np.exp(2) / (1 + np.exp(1) + np.exp(2)))) < 1e-4


def test_the_video_sink_draws_a_detections_keypoints():
    """Keypoints (a face's landmarks, a text box's corners) are drawn in annotated.mp4, where they were decoded."""
    from sdk.postprocess.detections import Detection
    from sdk.sinks.video import annotate

    image = np.full((48, 64, 3), 255, np.uint8)
    face = Detection("face", 0, 0.9, (10.0, 10.0, 40.0, 40.0), keypoints=((20.0, 22.0), (30.0, 22.0)))
    annotate(image, 0, [face])
    for x, y in ((20, 22), (30, 22)):
        assert (image[y, x] != 255).any(), (x, y)  # a dot where the keypoint is
    plain = np.full((48, 64, 3), 255, np.uint8)
    annotate(plain, 0, [Detection("face", 0, 0.9, (10.0, 10.0, 40.0, 40.0))])
    assert (plain[22, 20] == 255).all() and (plain[22, 30] == 255).all()  # nothing drawn where no keypoint was decoded
