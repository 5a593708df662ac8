"""Frames a recording promised that never arrived are counted lost, apart from corrupt ones: recordings cut with
FFmpeg (so the truth is known) and decoded by OpenCV for real; variable-rate recordings lose nothing."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from sdk.sources import FrameStream, open_reader
from sdk.spec.schema import Replay
from tests.sdk.sources.recordings import CLIP_FRAMES, DROP_20_TO_29, make
from tests.sdk.sources.recordings import clip as make_clip


@pytest.fixture()
def clip(tmp_path, video_path) -> Path:
    return make_clip(tmp_path, video_path)


def play(path: Path, replay: Replay = Replay(), max_frames: int | None = None) -> tuple[int, FrameStream]:  # noqa: B008
    stream = FrameStream(open_reader(f"file://{path.name}", path.parent), replay, max_frames=max_frames)
    delivered = 0
    with stream:
        for _ in stream:
            delivered += 1
    return delivered, stream


@pytest.mark.parametrize("container", ["avi", "mkv", "mov"])
def test_packets_cut_out_with_ffmpeg_are_counted_lost_by_their_timestamps(clip, tmp_path, container):
    """AVI keeps the cut's place as empty chunks, Matroska and MOV by the packets' times (MOV then states a lower rate)."""
    cut = make(tmp_path / f"cut.{container}", "-i", str(clip), *DROP_20_TO_29)
    delivered, stream = play(cut)
    assert (delivered, stream.counters.corrupt, stream.counters.lost) == (50, 0, 10)
    assert stream.counters.lost_last == "10 frame(s) missing between 1.900 s and 3.000 s (a hole in the timestamps)"


def test_frames_a_reencode_dropped_with_their_timestamps_kept_are_counted_lost(clip, tmp_path):
    """An MP4 whose sample table holds only the 50 frames (its frame count is no witness): the times are."""
    select = "select=not(between(n\\,20\\,29))"
    cut = make(tmp_path / "cut.mp4", "-i", str(clip), "-vf", select, "-fps_mode", "passthrough", "-c:v", "mpeg4", "-q:v", "4")
    delivered, stream = play(cut)
    assert (delivered, stream.counters.corrupt, stream.counters.lost) == (50, 0, 10)


def avi_frames(data: bytes) -> list[int]:
    """The offset of each frame chunk ('00dc') inside an AVI's movi list."""
    offset, found = data.index(b"movi") + 4, []
    while offset + 8 <= len(data):
        tag, size = data[offset : offset + 4], struct.unpack("<I", data[offset + 4 : offset + 8])[0]
        if tag == b"idx1":
            break
        if tag == b"LIST":
            offset += 12
            continue
        if tag.endswith(b"dc"):
            found.append(offset)
        offset += 8 + size + (size & 1)
    return found


def test_whole_frames_cut_out_of_an_avi_leave_no_hole_in_the_timestamps_and_are_counted_by_its_header(clip, tmp_path):
    data = clip.read_bytes()
    frames = avi_frames(data)
    assert len(frames) == CLIP_FRAMES
    cut = tmp_path / "chunks-cut.avi"
    cut.write_bytes(data[: frames[20]] + data[frames[30] :])  # frames 20 to 29, byte for byte
    delivered, stream = play(cut)
    assert (delivered, stream.counters.corrupt, stream.counters.lost) == (50, 0, 10)
    assert stream.counters.lost_last == "10 frame(s) the container counts never arrived (it promises 60; 50 arrived)"
    short = tmp_path / "short.avi"
    short.write_bytes(data[: frames[40]])  # the recording stopped after frame 39
    delivered, stream = play(short)
    assert (delivered, stream.counters.lost) == (40, 20)


def test_a_megabyte_cut_from_the_real_recording_every_frame_is_delivered_corrupt_or_lost(video_path, tmp_path):
    """The damage reported as one corrupt frame before: about 100 frames went with the megabyte."""
    data = video_path.read_bytes()
    damaged = tmp_path / "damaged.avi"
    damaged.write_bytes(data[: len(data) // 3] + data[len(data) // 3 + (1 << 20) :])
    delivered, stream = play(damaged)
    c = stream.counters
    assert delivered + c.corrupt + c.lost == 795 and c.lost >= 90 and c.corrupt >= 1


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("jitter", ["-vf", "setpts=(N+0.3*random(0))/10/TB", "-fps_mode", "passthrough", "-c:v", "mpeg4", "-q:v", "4"]),
        ("rate halves", ["-vf", "setpts=(N+(N-30)*gte(N\\,30)+0.001)/10/TB", "-fps_mode", "passthrough", "-c:v", "mpeg4", "-q:v", "4"]),
        ("claims 29.97 fps", ["-r", "29.97", "-c:v", "mpeg4", "-q:v", "4"]),  # Matroska: 100 ms apart, 178 frames "promised"
    ],
)
def test_variable_rate_recordings_lose_nothing(clip, tmp_path, name, args):
    recording = make(tmp_path / "variable.mkv", "-i", str(clip), *args)
    delivered, stream = play(recording)
    assert (delivered, stream.counters.lost) == (CLIP_FRAMES, 0), name


def test_a_looped_recording_counts_its_lost_frames_every_pass_and_a_run_stopped_early_only_what_it_saw(clip, tmp_path):
    cut = make(tmp_path / "cut.avi", "-i", str(clip), *DROP_20_TO_29)
    delivered, stream = play(cut, Replay(loop=True), max_frames=120)
    assert delivered == 120 and stream.counters.loops == 2 and stream.counters.lost == 20
    delivered, stream = play(cut, max_frames=15)  # stopped before the hole
    assert (delivered, stream.counters.lost) == (15, 0)
