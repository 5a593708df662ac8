"""A folder of still images, replayed in name order."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from sdk.errors import SourceError
from sdk.sources.base import CorruptFrame, FrameReader
from sdk.sources.uri import SourceUri

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".ppm", ".pgm", ".webp")


class ImageFolder(FrameReader):
    def __init__(self, uri: SourceUri) -> None:
        self.folder = Path(uri.target)
        self._files: list[Path] = []
        self._position = 0

    def open(self) -> None:
        if not self.folder.is_dir():
            raise SourceError(f"images://: {self.folder} is not a folder")
        self._files = sorted(p for p in self.folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
        if not self._files:
            raise SourceError(f"images://: no images ({', '.join(IMAGE_SUFFIXES)}) in {self.folder}")
        self._position = 0

    def read(self) -> np.ndarray | None:
        import cv2

        if self._position >= len(self._files):
            return None
        path = self._files[self._position]
        self._position += 1
        image = cv2.imread(str(path), cv2.IMREAD_COLOR)
        if image is None:
            raise CorruptFrame(f"cannot decode {path.name}")
        return image

    def skip(self) -> bool:
        if self._position >= len(self._files):
            return False
        self._position += 1  # not decoded
        return True

    def rewind(self) -> None:
        self._position = 0

    def close(self) -> None:
        self._files = []
