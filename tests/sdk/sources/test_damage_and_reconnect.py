"""Damaged frames are counted with the decoder's words; a reconnect that keeps its schedule is told from a
hung one; a camera absent at start is waited for, not failed."""

from __future__ import annotations

import random
import threading
import time

import cv2
import numpy as np

from sdk.errors import SourceError
from sdk.sources import FrameReader, FrameStream, open_reader
from sdk.spec.schema import Reconnect, Replay


def play(stream: FrameStream) -> int:
    delivered = 0
    with stream:
        for _ in stream:
            delivered += 1
    return delivered


def test_frames_ffmpeg_reports_damaged_are_counted_corrupt_with_its_message(video_path, tmp_path):
    data = bytearray(video_path.read_bytes())
    rng = random.Random(1)
    for k in range(5):  # five runs of 200 random bytes in the middle of the stream
        start = len(data) // 3 + k * (len(data) // 100)
        data[start : start + 200] = bytes(rng.randrange(256) for _ in range(200))
    damaged = tmp_path / "damaged.avi"
    damaged.write_bytes(bytes(data))
    clean = FrameStream(open_reader(f"file://{video_path.name}", video_path.parent), Replay())
    assert play(clean) == 795 and clean.counters.corrupt == 0
    stream = FrameStream(open_reader("file://damaged.avi", tmp_path), Replay())
    delivered = play(stream)
    assert stream.counters.corrupt >= 1 and delivered + stream.counters.corrupt == 795  # every frame: delivered or counted
    assert " @ 0x" in stream.counters.corrupt_last and stream.counters.corrupt_last.startswith("frame ")  # FFmpeg's own line


def test_a_damaged_frame_skipped_over_is_not_the_next_frames_damage(video_path, tmp_path):
    """The decoder's lines while it makes skipped frames (a calibration skips most of a recording) are theirs: the
    frame read after them is judged on its own lines (the reader takes the log's count before it decodes)."""
    from sdk.sources.base import CorruptFrame

    data = bytearray(video_path.read_bytes())
    start = len(data) // 3
    data[start : start + 200] = bytes(random.Random(1).randrange(256) for _ in range(200))
    (tmp_path / "damaged.avi").write_bytes(bytes(data))
    with open_reader("file://damaged.avi", tmp_path) as reader:  # frame by frame to a damaged frame followed by a clean one
        index, damaged = 0, False
        while True:
            try:
                assert reader.read() is not None, "no damaged frame followed by a clean one"
            except CorruptFrame:
                damaged = True
            else:
                if damaged:
                    break
            index += 1
    with open_reader("file://damaged.avi", tmp_path) as reader:  # skip to that clean frame, over the damaged one
        assert all(reader.skip() for _ in range(index))
        assert reader.read() is not None  # clean, as read frame by frame: the skipped frame's lines are not its own


def test_a_truncated_jpeg_is_corrupt_not_a_grey_filled_frame(tmp_path):
    image = cv2.resize(np.random.default_rng(0).integers(0, 255, (60, 80, 3), dtype=np.uint8), (640, 480))
    encoded = cv2.imencode(".jpg", image)[1].tobytes()
    for name in ("a", "b", "d"):
        (tmp_path / f"{name}.jpg").write_bytes(encoded)
    (tmp_path / "c.jpg").write_bytes(encoded[: len(encoded) * 2 // 3])  # the write stopped two thirds in
    stream = FrameStream(open_reader(f"images://{tmp_path.name}", tmp_path.parent), Replay())
    assert play(stream) == 3 and stream.counters.corrupt == 1
    assert stream.counters.corrupt_last == "c.jpg: truncated JPEG (no end-of-image marker after its last scan)"


class Camera(FrameReader):
    """A live camera: absent for `absent` opens, then delivers; `hang` makes open() block (a stuck driver)."""

    live = True

    def __init__(self, absent: int = 0, unplug_after: int | None = None) -> None:
        self.absent = absent
        self.unplug_after = unplug_after
        self.reads = 0
        self.hang = threading.Event()
        self.release = threading.Event()
        self.image = np.zeros((4, 4, 3), np.uint8)

    def open(self) -> None:
        if self.hang.is_set():
            self.release.wait(30)
        if self.absent:
            self.absent -= 1
            raise SourceError("no such camera")

    def read(self):
        self.reads += 1
        if self.reads == self.unplug_after:
            self.hang.set()
            return None  # the cable is out
        time.sleep(0.005)
        return self.image

    def close(self) -> None:
        pass


def wait_until(predicate, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_a_camera_absent_at_start_is_waited_for_and_said(tmp_path):
    camera = Camera(absent=3)
    stream = FrameStream(camera, Replay(), max_frames=5, reconnect=Reconnect(initial_backoff_s=0.05, max_backoff_s=0.1))
    stream.name = "v4l2:///dev/video9"
    stream.wait_for_camera = True  # as the service's runner sets it
    seen = []
    stream.on_idle = lambda: seen.append(stream.condition())
    assert play(stream) == 5  # no exception: the stream waited for the camera
    assert stream.counters.missing_at_start and stream.counters.reconnect_attempts == 3 and stream.counters.disconnects == 0
    assert stream.condition() is None


def test_a_reconnect_on_schedule_is_told_from_a_hung_one():
    camera = Camera(unplug_after=3)
    stream = FrameStream(camera, Replay(), reconnect=Reconnect(initial_backoff_s=0.05, max_backoff_s=0.1))
    stream.name = "csi://0"
    with stream:
        frames = iter(stream)
        next(frames)
        wait_until(lambda: stream.counters.reconnecting_since is not None)
        assert stream.condition().startswith("camera csi://0 reconnecting (gone for")
        # The first attempt's open() hangs: no attempt keeps its schedule, so the watchdog may be fed no more.
        wait_until(lambda: not stream.reconnect_on_schedule(margin_s=0.2), timeout=5)
        camera.hang.clear()
        camera.release.set()
        wait_until(lambda: stream.condition() is None)  # back
        assert next(frames) is not None and stream.counters.disconnects == 1
        stream.stop()


def test_a_measuring_run_does_not_wait_for_a_camera_absent_at_start():
    """A health check or a validation fails at once (the trial rolls back now, not at its deadline)."""
    import pytest

    stream = FrameStream(Camera(absent=3), Replay(), max_frames=5, reconnect=Reconnect(initial_backoff_s=0.05, max_backoff_s=0.1))
    with pytest.raises(SourceError, match="no such camera"):
        play(stream)
