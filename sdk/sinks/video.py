"""An annotated video a person can watch: boxes, labels and scores drawn on the source frames."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from sdk.errors import SdkError
from sdk.frame import Frame
from sdk.postprocess.detections import Detections
from sdk.sinks.files import partial_path, publish

_COLOURS = ((0, 200, 255), (255, 120, 0), (60, 220, 60), (200, 60, 220), (0, 80, 255))


class VideoSink:
    name = "video"

    def __init__(self, path: Path, *, fourcc: str = "mp4v", fps: float = 30.0) -> None:
        self.path = Path(path)
        self.fourcc = fourcc
        self.fps = fps
        # OpenCV picks the container from the suffix: keep it on the partial name.
        self._partial = partial_path(self.path).with_suffix(".partial" + self.path.suffix)
        self._writer = None
        self._size: tuple[int, int] | None = None
        self._canvas: np.ndarray | None = None

    def open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, frame: Frame, detections: Detections) -> None:
        import cv2

        image = frame.image
        if self._writer is None:
            self._size = (image.shape[1], image.shape[0])
            self._canvas = np.empty((image.shape[0], image.shape[1], 3), np.uint8)
            self._writer = cv2.VideoWriter(str(self._partial), cv2.VideoWriter_fourcc(*self.fourcc), self.fps, self._size)
            if not self._writer.isOpened():
                raise SdkError(
                    f"cannot write video {self.path} with codec {self.fourcc}",
                    hint="try fourcc: mp4v with a .mp4 path, or MJPG with .avi",
                )
        # Draw on our own canvas (allocated once): the source owns the frame buffer.
        if (image.shape[1], image.shape[0]) == self._size and image.ndim == 3:
            np.copyto(self._canvas, image)
        else:
            resized = cv2.resize(image, self._size)
            self._canvas[...] = resized[..., None] if resized.ndim == 2 else resized
        image = self._canvas
        for d in detections:
            x1, y1, x2, y2 = (int(round(v)) for v in d.box)
            colour = _COLOURS[d.class_id % len(_COLOURS)]
            cv2.rectangle(image, (x1, y1), (x2, y2), colour, 2)
            text = f"{d.label} {d.score:.2f}"
            (tw, th), _ = cv2.getTextSize(text, cv2.FONT_HERSHEY_SIMPLEX, 0.4, 1)
            top = max(0, y1 - th - 4)
            cv2.rectangle(image, (x1, top), (x1 + tw + 2, top + th + 4), colour, cv2.FILLED)
            cv2.putText(image, text, (x1 + 1, top + th + 1), cv2.FONT_HERSHEY_SIMPLEX, 0.4, (0, 0, 0), 1, cv2.LINE_AA)
        cv2.putText(image, f"frame {frame.index}", (8, 20), cv2.FONT_HERSHEY_SIMPLEX, 0.55, (255, 255, 255), 1, cv2.LINE_AA)
        self._writer.write(image)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.release()
            self._writer = None
            publish(self._partial, self.path)
