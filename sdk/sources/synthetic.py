"""Deterministic generated frames for tests: `synthetic://boxes?width=640&height=480&frames=100`."""

from __future__ import annotations

import time

import numpy as np

from sdk.errors import SourceError
from sdk.sources.base import CorruptFrame, FrameReader
from sdk.sources.uri import SourceUri
from sdk.spec.source import SYNTHETIC_KINDS

PATTERNS = SYNTHETIC_KINDS
DEFAULT_FRAMES = 100  # frames a synthetic source delivers when its URI gives no `frames=`


class SyntheticReader(FrameReader):
    """`boxes`: bright rectangles moving over a grey background; `noise`: seeded noise.

    `corrupt_every=K` marks every K-th frame corrupt, to exercise the skip-and-count path.
    `live=1&fps=F` makes it a camera that delivers on its own clock; `unplug_at=N&unplug_ms=M`
    pulls its cable after N frames for M milliseconds (reads end, opening fails, then it is back);
    `absent_ms=M` is a camera not yet plugged in: opening fails for the first M milliseconds.
    """

    def __init__(self, uri: SourceUri) -> None:
        if uri.target not in PATTERNS:
            raise SourceError(f"synthetic://{uri.target}: unknown kind; allowed: {', '.join(f'synthetic://{k}' for k in PATTERNS)}")
        self.pattern = uri.target
        self.width = uri.int_param("width", 640)
        self.height = uri.int_param("height", 480)
        self.frames = uri.int_param("frames", DEFAULT_FRAMES)
        self.seed = uri.int_param("seed", 0)
        self.corrupt_every = uri.int_param("corrupt_every", 0)
        self.live = bool(uri.int_param("live", 0))
        self.fps = uri.int_param("fps", 30)
        self.unplug_at = uri.int_param("unplug_at", 0)
        self.unplug_s = uri.int_param("unplug_ms", 500) / 1000
        self._unplugged_until: float | None = None
        absent_s = uri.int_param("absent_ms", 0) / 1000
        self._absent_until = time.monotonic() + absent_s if absent_s else None
        self._next_due = 0.0
        if self.fps < 1:
            raise SourceError("synthetic://: fps must be at least 1")
        if self.width < 1 or self.height < 1:
            raise SourceError("synthetic://: width and height must be at least 1")
        self._buffer = np.zeros((self.height, self.width, 3), np.uint8)
        self._position = 0

    def open(self) -> None:
        if self.live:
            if self._unplugged_until is not None and time.monotonic() < self._unplugged_until:
                raise SourceError("synthetic camera: not connected")
            if self._absent_until is not None and time.monotonic() < self._absent_until:
                raise SourceError("synthetic camera: not plugged in yet")
            self._next_due = time.monotonic()
            return  # a camera goes on from where it was: frame numbers do not restart
        self._position = 0

    def read(self) -> np.ndarray | None:
        if self._position >= self.frames:
            return None
        if self.live:
            if self.unplug_at and self._position == self.unplug_at and self._unplugged_until is None:
                self._unplugged_until = time.monotonic() + self.unplug_s
                return None  # the cable is out
            self._next_due += 1 / self.fps
            time.sleep(max(0.0, self._next_due - time.monotonic()))
        index = self._position
        self._position += 1
        if self.corrupt_every and (index + 1) % self.corrupt_every == 0:
            raise CorruptFrame(f"synthetic frame {index} marked corrupt")
        image = self._buffer
        if self.pattern == "noise":
            image[...] = np.random.default_rng(self.seed + index).integers(0, 256, image.shape, dtype=np.uint8)
            return image
        image[...] = 90
        for k in range(3):
            w, h = max(1, self.width // 6), max(1, self.height // 3)
            x = (index * (4 + k) + k * self.width // 3) % max(1, self.width - w)
            y = (k * self.height // 4) % max(1, self.height - h)
            image[y : y + h, x : x + w] = (40 + 80 * k, 200 - 50 * k, 220)
        return image

    def rewind(self) -> None:
        self._position = 0

    def close(self) -> None:
        pass
