"""What the benchmarks' `--smoke` modes share: smaller inputs for the same code paths (tests/test_benchmarks_smoke.py
runs every script that way in CI). Not a benchmark itself."""

from __future__ import annotations

from pathlib import Path


def short_clip(path: Path, frames: int) -> None:
    """The recording at `path` cut to its first `frames` frames (MJPG), so counting and seeking it costs little; what
    is done with it stays the same."""
    import cv2

    capture = cv2.VideoCapture(str(path))
    images = [capture.read()[1] for _ in range(frames)]
    capture.release()
    height, width = images[0].shape[:2]
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), 10, (width, height))
    for image in images:
        writer.write(image)
    writer.release()


def tiny_pipeline(folder: Path) -> Path:
    """The tests' tiny pipeline (tests/conftest.py: a constant 32 x 32 model on a synthetic source of 100 frames,
    unpaced) in `folder`: the same deploys, stages and health checks without the example's 12 MB detector."""
    from tests.conftest import PIPELINE, tiny_yolo

    folder.mkdir(parents=True, exist_ok=True)
    tiny_yolo(folder / "tiny.onnx")
    (folder / "tiny.yaml").write_text(PIPELINE.format(uri="synthetic://boxes?width=64&height=48&frames=100", rate="null", max_ms=5000))
    return folder / "tiny.yaml"
