"""JPEG and PNG frames of a recording decoded ahead, on threads of their own, while the pipeline works on the frame
before: the decoder (OpenCV's, which lets go of the GIL) bounds a compressed topic's frame rate, not the container.

A window of the next messages is kept, each compressed one's decode already started; messages leave it in the
recording's order, and the end of the recording or its damage is told only once every message before it left.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from sdk.sources.images import truncated
from sdk.sources.ros_image import COMPRESSED_TYPES

WORKERS = max(1, min(3, (os.cpu_count() or 2) - 1))  # a core is left to the frame loop
WINDOW = WORKERS + 1  # frames decoded ahead at most (a 1080p frame is 6 MB)


def decode_compressed(data: bytes) -> tuple[np.ndarray | None, str | None]:
    """(the image, None) or (None, why it cannot be decoded)."""
    import cv2

    problem = truncated(data)
    if problem is not None:
        return None, problem
    image = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    return (image, None) if image is not None else (None, f"cannot decode the image ({len(data)} bytes)")


class DecodeAhead:
    """An iterator of the recording's messages whose compressed images are being decoded (`message.pending`)."""

    def __init__(self, messages: Iterator, damaged: type[Exception]) -> None:
        self._source = messages
        self._damaged = damaged
        self._pool = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="decode-ahead")
        self._window: deque = deque()
        self._done = False
        self._damage: Exception | None = None

    def __iter__(self) -> DecodeAhead:
        return self

    def __next__(self):
        while len(self._window) < WINDOW and not self._done:
            try:
                message = next(self._source)
            except StopIteration:
                self._done = True
                break
            except self._damaged as exc:  # told once every message before it has left the window
                self._done, self._damage = True, exc
                break
            if message.problem is None and message.msgtype in COMPRESSED_TYPES:
                message.pending = self._pool.submit(decode_compressed, bytes(message.message.data))
            self._window.append(message)
        if self._window:
            return self._window.popleft()
        if self._damage is not None:
            damage, self._damage = self._damage, None
            raise damage
        raise StopIteration

    def close(self) -> None:
        for message in self._window:
            pending: Future | None = message.pending
            if pending is not None:
                pending.cancel()
        self._window.clear()
        self._pool.shutdown(wait=True, cancel_futures=True)
