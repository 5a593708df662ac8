"""What every camera or recording does: open, read frames into its own buffer, close."""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np


class FrameReader(ABC):
    """A device or file that yields images. Buffers belong to the reader."""

    live = False  # a live camera delivers on its own clock; a recording when asked
    lost_frames = 0  # frames the recording promised that never arrived (neither delivered nor corrupt), every pass
    lost_last: str | None = None  # the newest such loss, in words

    def __enter__(self) -> FrameReader:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @abstractmethod
    def open(self) -> None: ...

    @abstractmethod
    def read(self) -> np.ndarray | None:
        """The next image, or None at the end of the stream. Raises CorruptFrame for a bad one."""

    @abstractmethod
    def close(self) -> None: ...

    def skip(self) -> bool:
        """Move past the next frame without handing it out (it may not be decoded, so a corrupt one
        is not noticed); False at the end of the stream."""
        try:
            return self.read() is not None
        except CorruptFrame:
            return True

    def rewind(self) -> None:
        """Start again from the first frame (loop replay); live readers cannot."""
        self.close()
        self.open()

    @property
    def nominal_fps(self) -> float | None:
        return None


class CorruptFrame(Exception):
    """One frame could not be decoded; the stream goes on (counted, skipped)."""
