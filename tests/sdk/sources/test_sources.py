"""Sources: URIs, real video and image folders, replay pacing, corrupt frames, and live newest-wins capture."""

from __future__ import annotations

import threading
import time

import cv2
import numpy as np
import pytest

from sdk.errors import ConfigError, SourceError
from sdk.sources import FrameReader, FrameStream, open_reader, parse_source_uri
from sdk.sources.base import CorruptFrame
from sdk.sources.opencv_capture import argus_pipeline
from sdk.spec.schema import Replay


class FakeClock:
    """Monotonic nanoseconds that only move when the stream sleeps or a stage 'works'."""

    def __init__(self) -> None:
        self.now = 1_000_000_000

    def __call__(self) -> int:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += int(round(seconds * 1e9))


def collect(stream: FrameStream, work_ns: int = 0, clock: FakeClock | None = None):
    frames = []
    with stream:
        for frame in stream:
            frames.append((frame.index, frame.t_capture_ns))
            if clock is not None:
                clock.now += work_ns
    return frames


def test_uri_parsing_and_confinement(tmp_path):
    uri = parse_source_uri("synthetic://boxes?width=32&height=16&frames=3")
    assert (uri.scheme, uri.target, uri.params["width"]) == ("synthetic", "boxes", "32")
    assert parse_source_uri("gst://videotestsrc ! video/x-raw,width=64 ! appsink").target.startswith("videotestsrc")
    assert parse_source_uri("v4l2:///dev/video0?width=1280").target == "/dev/video0"
    (tmp_path / "clip.avi").write_bytes(b"")
    assert parse_source_uri("file://clip.avi", tmp_path).target == str((tmp_path / "clip.avi").resolve())
    with pytest.raises(ConfigError, match="leaves the folder"):
        parse_source_uri("file://../clip.avi", tmp_path)
    with pytest.raises(SourceError, match="unknown scheme"):
        parse_source_uri("rtsp://camera")


def test_csi_maps_to_the_argus_pipeline():
    text = argus_pipeline(1, 1280, 720, 60)
    assert text.startswith("nvarguscamerasrc sensor-id=1 ")
    assert "width=1280,height=720,framerate=60/1" in text and text.endswith("sync=false")


def test_gstreamer_without_support_is_a_clear_error():
    reader = open_reader("gst://videotestsrc ! appsink")
    build = cv2.getBuildInformation()
    if any("GStreamer" in line and "YES" in line for line in build.splitlines()):
        pytest.skip("this OpenCV has GStreamer")
    with pytest.raises(SourceError, match="no GStreamer support"):
        reader.open()


def test_real_video_every_frame_with_index(video_path):
    reader = open_reader(f"file://{video_path.name}", video_path.parent)
    frames = collect(FrameStream(reader, Replay()))
    assert len(frames) == 795
    assert [i for i, _ in frames] == list(range(795))
    stamps = [t for _, t in frames]
    assert stamps == sorted(stamps)


def test_skipping_frames_lands_on_the_same_frame_as_reading_them(video_path):
    with open_reader(f"file://{video_path.name}", video_path.parent) as reader:
        for _ in range(5):
            reader.read()
        sixth = reader.read().copy()
    with open_reader(f"file://{video_path.name}", video_path.parent) as reader:
        assert all(reader.skip() for _ in range(5))
        assert np.array_equal(reader.read(), sixth)
        skipped = sum(1 for _ in iter(reader.skip, False))
    assert skipped == 795 - 6


def test_skipping_images_does_not_decode_them(tmp_path):
    for i, value in enumerate((10, 20)):
        cv2.imwrite(str(tmp_path / f"{i:03d}.png"), np.full((8, 12, 3), value, np.uint8))
    (tmp_path / "000b.jpg").write_bytes(b"corrupt")  # between them, in name order
    with open_reader("images://.", tmp_path) as reader:
        assert reader.skip() and reader.skip()  # the corrupt one is passed over, not raised
        assert int(reader.read()[0, 0, 0]) == 20
        assert not reader.skip()


def test_missing_video_is_a_source_error(tmp_path):
    (tmp_path / "broken.avi").write_bytes(b"not a video")
    with pytest.raises(SourceError, match="cannot open video file"):
        open_reader("file://broken.avi", tmp_path).open()


def test_image_folder_in_name_order_skips_undecodable(tmp_path):
    for i, value in enumerate((10, 20, 30)):
        cv2.imwrite(str(tmp_path / f"{i:03d}.png"), np.full((8, 12, 3), value, np.uint8))
    (tmp_path / "001b.jpg").write_bytes(b"corrupt")
    stream = FrameStream(open_reader("images://.", tmp_path), Replay())
    seen = []
    with stream:
        for frame in stream:
            seen.append(int(frame.image[0, 0, 0]))
    assert seen == [10, 20, 30]
    assert stream.counters.corrupt == 1


def test_frame_limit_and_loop():
    stream = FrameStream(open_reader("synthetic://boxes?frames=4&width=16&height=16"), Replay(loop=True, frames=10))
    frames = collect(stream)
    assert [i for i, _ in frames] == list(range(10))
    assert stream.counters.loops == 2


def test_corrupt_frames_are_counted_and_skipped():
    stream = FrameStream(open_reader("synthetic://noise?frames=10&corrupt_every=3&width=8&height=8"), Replay())
    frames = collect(stream)
    assert len(frames) == 7 and stream.counters.corrupt == 3


def test_paced_replay_stamps_the_schedule_and_shows_lateness_as_latency():
    clock = FakeClock()
    stream = FrameStream(open_reader("synthetic://boxes?frames=6&width=8&height=8"), Replay(rate_fps=10), clock=clock, sleep=clock.sleep)
    start = clock.now
    # Each frame takes 150 ms of work at 10 fps (100 ms period): the pipeline falls behind.
    frames = collect(stream, work_ns=150_000_000, clock=clock)
    assert [t - start for _, t in frames] == [k * 100_000_000 for k in range(6)]  # due times, not pick-up times
    assert stream.counters.dropped == 0
    assert clock.now - frames[-1][1] == 150_000_000 + 5 * 50_000_000  # the last frame waited 250 ms


def test_paced_replay_waits_when_ahead():
    clock = FakeClock()
    stream = FrameStream(open_reader("synthetic://boxes?frames=3&width=8&height=8"), Replay(rate_fps=20), clock=clock, sleep=clock.sleep)
    start = clock.now
    collect(stream, work_ns=10_000_000, clock=clock)
    assert clock.now - start == 2 * 50_000_000 + 10_000_000


def test_late_frames_drop_keeps_the_newest_and_counts():
    clock = FakeClock()
    stream = FrameStream(
        open_reader("synthetic://boxes?frames=10&width=8&height=8"),
        Replay(rate_fps=10, late_frames="drop"),
        clock=clock,
        sleep=clock.sleep,
    )
    frames = collect(stream, work_ns=250_000_000, clock=clock)
    indices = [i for i, _ in frames]
    # 250 ms of work per frame at 10 fps: a frame is stale once its successor is due.
    assert indices == [0, 2, 5, 7]
    assert stream.counters.dropped == 6
    for index, stamp in frames:  # a delivered frame carries its own due time
        assert stamp - frames[0][1] == index * 100_000_000


class _FastCamera(FrameReader):
    """A 'live' reader that produces frames as fast as it can: the consumer cannot keep up."""

    live = True

    def __init__(self, frames: int) -> None:
        self.frames, self.sent = frames, 0
        self.buffer = np.zeros((4, 4, 3), np.uint8)

    def open(self) -> None:
        self.sent = 0

    def read(self):
        if self.sent >= self.frames:
            return None
        if self.sent == 5:
            self.sent += 1
            raise CorruptFrame("bad")
        self.buffer[...] = self.sent % 256
        self.sent += 1
        time.sleep(0.001)
        return self.buffer

    def close(self) -> None:
        pass


def test_live_capture_newest_wins_and_every_drop_is_counted():
    stream = FrameStream(_FastCamera(200), Replay())
    seen = []
    with stream:
        for frame in stream:
            assert int(frame.image[0, 0, 0]) == frame.index % 256  # the buffer holds this frame's pixels
            seen.append(frame.index)
            time.sleep(0.01)
    assert seen == sorted(seen)
    counters = stream.counters
    assert counters.corrupt == 1
    assert counters.dropped > 0
    assert counters.delivered + counters.dropped + counters.corrupt == 200


def test_live_capture_stops_on_request():
    camera = _FastCamera(10**9)
    stream = FrameStream(camera, Replay())
    with stream:
        threading.Timer(0.2, stream.stop).start()
        count = sum(1 for _ in stream)
    assert count > 0
    assert not stream._live._thread.is_alive()


def test_file_reader_reuses_its_buffer(video_path):
    reader = open_reader(f"file://{video_path.name}", video_path.parent)
    with reader:
        first = reader.read()
        second = reader.read()
    assert first is second  # decoded into the same memory: no image allocated per frame


@pytest.mark.parametrize("uri", ["synthetic://plasma", "synthetic://boxes?width=x"])
def test_bad_synthetic_parameters(uri):
    with pytest.raises(SourceError):
        open_reader(uri)


def test_an_unknown_synthetic_kind_is_refused_at_load_naming_the_kinds():
    from sdk.spec.source import Source

    for uri in ("synthetic://plasma?width=64", "synthetic://"):
        with pytest.raises(ValueError, match=r"allowed: synthetic://boxes, synthetic://noise") as refused:
            Source(uri=uri)
        assert repr(uri) in str(refused.value)
    assert Source(uri="synthetic://noise?width=8&height=8").uri.startswith("synthetic://noise")
    with pytest.raises(SourceError, match="allowed: synthetic://boxes, synthetic://noise"):
        open_reader("synthetic://plasma")
