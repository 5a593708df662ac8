"""The real detector over the real clip (vtest.avi, a pedestrian street scene), once per session:
the detections the tracker tests feed to ours and to the reference tracker."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from sdk.backends import create_backend
from sdk.postprocess import create_postprocessor
from sdk.preprocess import CpuPreprocessor

FRAMES = 795  # the whole clip (80 s at 10 fps of a street: people cross, pass each other and are occluded)


class Frame:
    """One frame's NMS output: boxes [N, 4] float32 (source pixels), scores [N], best first."""

    def __init__(self, boxes: np.ndarray, scores: np.ndarray) -> None:
        self.boxes, self.scores = boxes, scores


@pytest.fixture(scope="session")
def clip_detections(request, example_pipeline, video_path, tmp_path_factory) -> list[Frame]:
    """Computed once for the whole run (shared by the xdist workers through a file: the detector is deterministic
    on one thread, and every worker would compute the same 795 frames). The prepared model is asked for only by
    the worker that computes them: a worker that finds the file never prepares the model."""
    from tests.conftest import shared_folder

    def compute(folder) -> None:
        frames = _detect(example_pipeline, request.getfixturevalue("prepared_example"), video_path)
        np.savez(folder / "detections.npz", **{f"b{i}": f.boxes for i, f in enumerate(frames)}, **{f"s{i}": f.scores for i, f in enumerate(frames)})

    with np.load(shared_folder(tmp_path_factory, "clip-detections", compute) / "detections.npz") as stored:
        return [Frame(stored[f"b{i}"], stored[f"s{i}"]) for i in range(FRAMES)]


def _detect(example_pipeline, prepared_example, video_path) -> list[Frame]:
    spec = example_pipeline.spec
    capture = cv2.VideoCapture(str(video_path))
    frames = []
    with create_backend("onnxruntime", prepared_example.model_path, threads=1) as backend:
        (buffer,) = backend.inputs.values()
        pre = CpuPreprocessor(spec.preprocess, buffer)
        post = create_postprocessor(spec.postprocess, backend.outputs, (300, 300), prepared_example.load_tensors())
        for _ in range(FRAMES):
            ok, bgr = capture.read()
            assert ok
            geometry = pre(bgr)
            backend.infer()
            found = post(geometry)
            n = found.count
            frames.append(Frame(found.boxes[:n].copy(), found.scores[:n].copy()))
    capture.release()
    return frames


def fill(detections, frame: Frame, keep=None) -> None:
    """Put a frame's detections (or the `keep` rows of them) into a Detections, as postprocess leaves them."""
    rows = np.arange(len(frame.scores)) if keep is None else np.asarray(keep, np.intp)
    n = len(rows)
    detections.boxes[:n] = frame.boxes[rows]
    detections.scores[:n] = frame.scores[rows]
    detections.class_ids[:n] = 0
    detections.count = n
