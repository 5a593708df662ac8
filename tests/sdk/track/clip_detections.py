"""The example's detector over the whole real clip (vtest.avi, a pedestrian street scene, 795 frames): the detections
the tracker tests feed to ours and to the reference tracker, stored beside this file (clip_detections.npz).

They are the same on every run (the detector is deterministic on one thread), and computing them costs about 25 CPU-s
(30 ms a frame), so they are stored once instead of computed by every test run. test_bytetrack.py checks them against
the detector on a sample of frames spread over the clip: a change of the model, its preparation, the preprocessing or
the postprocessing that moves them fails that test, which says to write them again:

    python -m tests.sdk.track.clip_detections
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

STORED = Path(__file__).with_name("clip_detections.npz")
FRAMES = 795  # the whole clip (80 s at 10 fps of a street: people cross, pass each other and are occluded)


class Frame:
    """One frame's NMS output: boxes [N, 4] float32 (source pixels), scores [N], best first."""

    def __init__(self, boxes: np.ndarray, scores: np.ndarray) -> None:
        self.boxes, self.scores = boxes, scores


def detect(spec, artifacts, video_path: Path, indices) -> dict[int, Frame]:
    """The detector's output on the frames `indices` of the clip (the others are decoded, not converted or detected)."""
    from tests.example_detector import detect_frames

    frames = {}
    for index, _, found in detect_frames(spec, artifacts, video_path, indices):
        n = found.count
        frames[index] = Frame(found.boxes[:n].copy(), found.scores[:n].copy())
    return frames


def save(frames: list[Frame], path: Path = STORED) -> None:
    """One array of every box and score, and each frame's count (frame k's rows follow frame k - 1's)."""
    np.savez_compressed(
        path,
        counts=np.array([len(f.scores) for f in frames], np.int32),
        boxes=np.concatenate([f.boxes for f in frames]).astype(np.float32),
        scores=np.concatenate([f.scores for f in frames]).astype(np.float32),
    )


def load(path: Path = STORED) -> list[Frame]:
    with np.load(path) as stored:
        counts, boxes, scores = stored["counts"], stored["boxes"], stored["scores"]
    ends = np.cumsum(counts)
    assert len(counts) == FRAMES and ends[-1] == len(scores) == len(boxes), f"{path}: not the whole clip's detections"
    return [Frame(boxes[end - n : end], scores[end - n : end]) for n, end in zip(counts, ends, strict=True)]


def main() -> None:
    import tempfile

    from sdk.spec import load_pipeline
    from tests.conftest import EXAMPLE, asset
    from tools.models.prepare import PrepareModel

    pipeline = load_pipeline(EXAMPLE)
    with tempfile.TemporaryDirectory() as cache:
        found = detect(pipeline.spec, PrepareModel(pipeline, Path(cache))(), asset("vtest.avi"), range(FRAMES))
    save([found[k] for k in range(FRAMES)])
    print(f"wrote {STORED}: {sum(len(f.scores) for f in found.values())} detections on {FRAMES} frames")


if __name__ == "__main__":
    main()
