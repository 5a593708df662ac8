"""A folder of still images, replayed in name order."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from sdk.errors import SourceError
from sdk.sources.base import CorruptFrame, FrameReader
from sdk.sources.uri import SourceUri

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".ppm", ".pgm", ".webp")


JPEG_SOI, JPEG_SOS, JPEG_EOI = b"\xff\xd8", b"\xff\xda", b"\xff\xd9"
PNG_SIGNATURE, PNG_IEND = b"\x89PNG\r\n\x1a\n", b"IEND\xaeB`\x82"


def truncated(data: bytes) -> str | None:
    """Why an image file is cut short, or None. A JPEG must end its last scan with the EOI marker
    (0xFFD9; in the scan data 0xFF is always escaped, so EOI after the last SOS is the real end; an
    EXIF thumbnail's own EOI comes before the main image's SOS); a PNG must have its IEND chunk."""
    if data.startswith(JPEG_SOI):
        if data.rfind(JPEG_EOI) < data.rfind(JPEG_SOS):
            return "truncated JPEG (no end-of-image marker after its last scan)"
    elif data.startswith(PNG_SIGNATURE) and PNG_IEND not in data[-64:]:
        return "truncated PNG (no IEND chunk)"
    return None


def read_image(path: Path) -> np.ndarray:
    """One still image as BGR pixels, or CorruptFrame saying why not (unreadable, cut short, not an image)."""
    import cv2

    try:
        data = path.read_bytes()
    except OSError as exc:
        raise CorruptFrame(f"cannot read {path.name}: {exc.strerror}") from None
    problem = truncated(data)
    if problem is not None:  # OpenCV would decode it, the missing part grey: a damaged frame, not a frame
        raise CorruptFrame(f"{path.name}: {problem}")
    image = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    if image is None:
        raise CorruptFrame(f"cannot decode {path.name}")
    return image


class ImageFolder(FrameReader):
    def __init__(self, uri: SourceUri) -> None:
        self.folder = Path(uri.target)
        self._files: list[Path] = []
        self._position = 0
        self.file_name: str | None = None  # the file the newest frame was read from

    def open(self) -> None:
        if not self.folder.is_dir():
            raise SourceError(f"images://: {self.folder} is not a folder")
        self._files = sorted(p for p in self.folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
        if not self._files:
            raise SourceError(f"images://: no images ({', '.join(IMAGE_SUFFIXES)}) in {self.folder}")
        self._position = 0

    def read(self) -> np.ndarray | None:
        if self._position >= len(self._files):
            return None
        path = self._files[self._position]
        self._position += 1
        self.file_name = path.name
        return read_image(path)

    def skip(self) -> bool:
        if self._position >= len(self._files):
            return False
        self._position += 1  # not decoded
        return True

    def rewind(self) -> None:
        self._position = 0

    def close(self) -> None:
        self._files = []
