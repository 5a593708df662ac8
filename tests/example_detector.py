"""The example detector's own stages (prepared model, `CpuPreprocessor`, its SSD postprocessing) over chosen frames of
a video: what the tests that compare its detections with a reference or a stored copy run."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path


def detect_frames(spec, artifacts, video_path: Path, wanted, threads: int = 1) -> Iterator[tuple[int, object, object]]:
    """(index, BGR frame, the postprocessor's detections) for each frame in `wanted`, in order; the frames between are
    decoded, not converted or detected. The detections are the postprocessor's own buffer: copy what is kept."""
    import cv2

    from sdk.backends import create_backend
    from sdk.postprocess import create_postprocessor
    from sdk.preprocess import CpuPreprocessor

    wanted = set(wanted)
    capture = cv2.VideoCapture(str(video_path))
    try:
        with create_backend("onnxruntime", artifacts.model_path, threads=threads) as backend:
            (buffer,) = backend.inputs.values()
            pre = CpuPreprocessor(spec.preprocess, buffer)
            post = create_postprocessor(spec.postprocess, backend.outputs, (300, 300), artifacts.load_tensors())
            for index in range(max(wanted) + 1):
                assert capture.grab(), f"{video_path}: frame {index} is missing"
                if index not in wanted:
                    continue
                ok, bgr = capture.retrieve()
                assert ok, f"{video_path}: frame {index} does not decode"
                geometry = pre(bgr)
                backend.infer()
                yield index, bgr, post(geometry)
    finally:
        capture.release()
