"""The sources and batch stages: every camera's frames, gathered into one batch per inference call.

One camera is read in the loop's own thread (no copy, no thread: the single-camera path as it always
was). Several cameras are read by one thread each into a two-frame mailbox of copies (a source owns
its frame buffer only until its next read); the gatherer waits for a frame of every camera that is
still running, at most `batch.wait_ms` after the batch's first frame arrived, then hands on what
arrived. A camera that is late, stalled or reconnecting leaves its slot empty (counted against it,
`skipped_slots`) and never holds the others; a camera whose recording ended leaves the batch for good.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, replace

from sdk.frame import Frame
from sdk.sources import FrameStream
from sdk.sources.stream import IDLE_S

MAILBOX = 2  # frames a camera may have waiting: one in the batch being gathered, one read ahead


@dataclass
class CameraSlot:
    """One camera of the run: its name, position in the batch and its stream."""

    name: str
    index: int
    stream: FrameStream
    skipped_slots: int = 0  # batches that ran without a frame of this camera while it was running


class SingleCamera:
    """One camera: its frames one batch each, read in the caller's thread."""

    name = "sources"

    def __init__(self, camera: CameraSlot, tag: bool) -> None:
        self.cameras = [camera]
        self._tag = tag  # name the camera in the frames (`sources:` with one camera)

    @property
    def on_idle(self):
        return self.cameras[0].stream.on_idle

    @on_idle.setter
    def on_idle(self, callback) -> None:  # read in the loop's thread: the stream itself calls it while it waits
        self.cameras[0].stream.on_idle = callback

    @property
    def on_end(self):
        return self.cameras[0].stream.on_end

    @on_end.setter
    def on_end(self, callback) -> None:
        self.cameras[0].stream.on_end = callback

    def __enter__(self) -> SingleCamera:
        self.cameras[0].stream.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.cameras[0].stream.__exit__(*exc)

    def stop(self) -> None:
        self.cameras[0].stream.stop()

    def batches(self) -> Iterator[list[tuple[CameraSlot, Frame]]]:
        camera = self.cameras[0]
        for frame in camera.stream:
            yield [(camera, replace(frame, camera=camera.name) if self._tag else frame)]


class CameraGatherer:
    """Several cameras: a reading thread each, and batches gathered under the `wait_ms` deadline."""

    name = "batch"

    def __init__(self, cameras: list[CameraSlot], wait_ms: float) -> None:
        self.cameras = cameras
        self.wait_s = wait_ms / 1000.0
        self.on_idle = None  # called every IDLE_S while no camera has a frame (a service's watchdog)
        self.on_end = None  # called once when every camera's frames ended (before anything is closed)
        self._cond = threading.Condition()
        self._mail: list[deque[Frame]] = [deque() for _ in cameras]
        self._running = [True] * len(cameras)
        self._errors: list[BaseException] = []
        self._threads: list[threading.Thread] = []
        self._stopping = False

    def __enter__(self) -> CameraGatherer:
        opened = []
        try:
            for camera in self.cameras:
                camera.stream.__enter__()
                opened.append(camera)
        except BaseException:
            for camera in reversed(opened):
                camera.stream.__exit__(None, None, None)
            raise
        for camera in self.cameras:
            thread = threading.Thread(target=self._read, args=(camera,), name=f"camera-{camera.name}", daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
        for thread in self._threads:
            thread.join(timeout=10)
        for camera in reversed(self.cameras):
            camera.stream.__exit__(*exc)

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        for camera in self.cameras:
            camera.stream.stop()

    def _read(self, camera: CameraSlot) -> None:
        mailbox = self._mail[camera.index]
        try:
            for frame in camera.stream:
                copy = replace(frame, image=frame.image.copy(), camera=camera.name)
                with self._cond:
                    while len(mailbox) >= MAILBOX and not self._stopping:
                        self._cond.wait()
                    if self._stopping:
                        return
                    mailbox.append(copy)
                    self._cond.notify_all()
        except BaseException as exc:  # noqa: BLE001 - handed to the loop's thread, raised there
            with self._cond:
                self._errors.append(exc)
        finally:
            with self._cond:
                self._running[camera.index] = False
                self._cond.notify_all()

    def batches(self) -> Iterator[list[tuple[CameraSlot, Frame]]]:
        cond, mail, running = self._cond, self._mail, self._running
        while True:
            with cond:
                # The first frame of the batch: wait as long as it takes (a live camera may be reconnecting).
                while not self._stopping and not self._errors and not any(mail) and any(running):
                    if not cond.wait(IDLE_S) and self.on_idle is not None:
                        self.on_idle()
                if self._errors:
                    raise self._errors[0]
                if self._stopping:
                    return
                if not any(mail):  # every camera ended and nothing is left
                    if self.on_end is not None:
                        self.on_end()
                    return
                deadline = time.monotonic() + self.wait_s
                while not self._stopping:
                    if all(mail[c.index] or not running[c.index] for c in self.cameras):
                        break
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    cond.wait(left)
                batch = []
                for camera in self.cameras:
                    if mail[camera.index]:
                        batch.append((camera, mail[camera.index].popleft()))
                    elif running[camera.index]:
                        camera.skipped_slots += 1
                cond.notify_all()  # room in the mailboxes: the readers go on
            yield batch


__all__ = ["CameraGatherer", "CameraSlot", "SingleCamera"]
