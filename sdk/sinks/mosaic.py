"""One annotated video of every camera: a grid of tiles, each camera's newest annotated frame in its own.

A person watching several cameras wants them side by side on one clock, not N files to open together.
The mosaic is written through the ordinary video sink (segments, free-space floor, publication), so
it keeps every guarantee of `annotated.mp4`. A mosaic frame is written when a camera delivers its next
frame before the others have all delivered theirs (one mosaic frame per round of the cameras, at the
fastest camera's pace), so a late or dead camera never stalls the picture: its tile keeps its last
frame, marked as late.
"""

from __future__ import annotations

import math

import numpy as np

from sdk.frame import Frame
from sdk.postprocess.detections import Detections
from sdk.sinks.video import VideoSink, annotate, fit

TILE_WIDTH = 640  # pixels across one camera's tile: a 2 x 2 mosaic is 1280 wide, a 3 x 4 one 2560
_LABEL = (255, 255, 255)
_LATE = (0, 0, 255)


def grid(cameras: int) -> tuple[int, int]:
    """(columns, rows) of the mosaic: as square as it gets, wider than tall."""
    columns = math.ceil(math.sqrt(cameras))
    return columns, math.ceil(cameras / columns)


class MosaicSink:
    """Every camera's annotated frames in one video (`sinks[].mosaic: true` with `sources:`)."""

    name = "video"

    def __init__(self, video: VideoSink, cameras: list[str], *, tile_width: int = TILE_WIDTH) -> None:
        self.video = video
        self.cameras = list(cameras)
        self.stats = video.stats
        self.tile_width = tile_width
        self._slots = {camera: i for i, camera in enumerate(self.cameras)}
        self._canvas: np.ndarray | None = None
        self._tile: tuple[int, int] | None = None  # (width, height)
        self._fresh: set[str] = set()  # cameras whose tile changed since the last mosaic frame
        self._missed = dict.fromkeys(self.cameras, 0)
        self._scratch: dict[str, np.ndarray] = {}

    def open(self) -> None:
        self.video.open()

    def write(self, frame: Frame, detections: Detections) -> None:
        from sdk.pixels import as_bgr

        image = as_bgr(frame.image)
        if self._canvas is None:
            self._layout(image)
        if frame.camera in self._fresh:  # a new round: the mosaic of the last one goes out first
            self._flush()
        self._draw(frame, image, detections)
        self._fresh.add(frame.camera)
        if len(self._fresh) == len(self.cameras):
            self._flush()

    def _layout(self, first: np.ndarray) -> None:
        """Tiles of the first frame's aspect ratio (other cameras are letterboxed into theirs)."""
        height, width = first.shape[:2]
        tile_h = max(2, round(self.tile_width * height / width / 2) * 2)  # even sides: encoders want them
        self._tile = (self.tile_width, tile_h)
        columns, rows = grid(len(self.cameras))
        self._canvas = np.zeros((rows * tile_h, columns * self.tile_width, 3), np.uint8)

    def _tile_view(self, camera: str) -> np.ndarray:
        columns, _ = grid(len(self.cameras))
        slot = self._slots[camera]
        width, height = self._tile
        top, left = (slot // columns) * height, (slot % columns) * width
        return self._canvas[top : top + height, left : left + width]

    def _draw(self, frame: Frame, image: np.ndarray, detections: Detections) -> None:
        """The camera's frame annotated at its own size, then letterboxed into its tile."""
        import cv2

        annotated = self._scratch.get(frame.camera)
        if annotated is None or annotated.shape[:2] != image.shape[:2]:  # one drawing buffer a camera, not one a frame
            annotated = self._scratch[frame.camera] = np.empty((*image.shape[:2], 3), np.uint8)
        fit(image, annotated)  # the source owns its frame: drawn on our copy
        annotate(annotated, frame.index, detections)
        tile = self._tile_view(frame.camera)
        tile[...] = 0
        scale = min(tile.shape[1] / annotated.shape[1], tile.shape[0] / annotated.shape[0])
        width, height = max(1, round(annotated.shape[1] * scale)), max(1, round(annotated.shape[0] * scale))
        left, top = (tile.shape[1] - width) // 2, (tile.shape[0] - height) // 2
        tile[top : top + height, left : left + width] = cv2.resize(annotated, (width, height), interpolation=cv2.INTER_AREA)
        self._missed[frame.camera] = 0
        self._label(frame.camera)

    def _label(self, camera: str) -> None:
        import cv2

        tile = self._tile_view(camera)
        late = self._missed[camera] > 0
        text, colour = (f"{camera}: no new frame", _LATE) if late else (camera, _LABEL)
        cv2.putText(tile, text, (8, tile.shape[0] - 10), cv2.FONT_HERSHEY_SIMPLEX, 0.6, colour, 1, cv2.LINE_AA)

    def _flush(self) -> None:
        if self._canvas is None or not self._fresh:
            return
        for camera in self.cameras:
            if camera not in self._fresh:
                self._missed[camera] += 1
                if self._missed[camera] == 1:  # marked once; the tile keeps its last picture
                    self._label(camera)
        self.video.write_image(self._canvas)
        self._fresh.clear()

    def close(self) -> None:
        try:
            self._flush()
        finally:
            self.video.close()

    def describe(self) -> dict:
        return self.video.describe()
