"""Read ahead: an iterator drained by a background thread into a bounded queue.

Calibration decodes and preprocesses the next frames (OpenCV releases the GIL) while ONNX Runtime
runs the current one, instead of reading all of them first. No library in the stack offers this
for a plain iterator in a few lines, with errors carried over to the consumer and the producer
stopped when the consumer leaves early.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator
from typing import Generic, TypeVar

Item = TypeVar("Item")
_END = object()


class Prefetched(Generic[Item]):
    """A context manager; iterate inside the `with` block. `depth` bounds the items held ahead."""

    def __init__(self, source: Iterable[Item], depth: int = 8) -> None:
        self._source = source
        self._queue: queue.Queue = queue.Queue(maxsize=max(1, depth))
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Prefetched[Item]:
        self._thread = threading.Thread(target=self._produce, name="prefetch", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        while self._thread.is_alive():  # unblock a producer waiting on a full queue
            try:
                self._queue.get(timeout=0.05)
            except queue.Empty:
                pass
        self._thread.join()

    def __iter__(self) -> Iterator[Item]:
        if self._thread is None:
            raise RuntimeError("Prefetched used outside its `with` block")
        while True:
            item = self._queue.get()
            if item is _END:
                return
            if isinstance(item, _Failure):
                raise item.error
            yield item

    def _produce(self) -> None:
        iterator = iter(self._source)
        try:
            for item in iterator:
                if not self._put(item):
                    return
            self._put(_END)
        except BaseException as error:  # carried to the consumer's thread
            self._put(_Failure(error))
        finally:
            close = getattr(iterator, "close", None)
            if close is not None:
                close()  # a generator's `with` blocks (an open video) end here, in its own thread

    def _put(self, item) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False


class _Failure:
    def __init__(self, error: BaseException) -> None:
        self.error = error
