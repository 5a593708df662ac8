"""The gap count's rules on presentation times as OpenCV reports them: holes in a regular stream count,
variable rates and changes of rate do not, the container's count only where its rate is the stream's."""

from __future__ import annotations

import random

import pytest

from sdk.sources.frame_gaps import FrameGaps

N = 800


def lost(times: list[float], fps: float | None = 10.0, count: float | None = None, *, ended: bool = True) -> FrameGaps:
    gaps = FrameGaps()
    gaps.start_pass(fps, count)
    for t in times:
        gaps.frame(t)
    if ended:
        gaps.end()
    return gaps


def at(frames) -> list[float]:
    return [n * 100.0 for n in frames]  # 10 fps


def test_a_hole_in_a_regular_stream_is_its_missing_frames():
    gaps = lost(at([*range(20), *range(30, N)]), count=N)
    assert gaps.lost == 10 and gaps.last == "10 frame(s) missing between 1.900 s and 3.000 s (a hole in the timestamps)"


def test_a_hole_counts_whatever_rate_the_container_states():
    assert lost(at([*range(20), *range(30, N)]), fps=9.62).lost == 10  # an MP4's average rate, lowered by the hole
    assert lost(at([*range(20), *range(30, N)]), fps=None).lost == 10


def test_the_container_count_tells_frames_with_no_hole_in_the_timestamps():
    gaps = lost(at(range(689)), count=795)  # a byte range cut out of an AVI: the demuxer numbers what it finds
    assert gaps.lost == 106 and gaps.last == "106 frame(s) the container counts never arrived (it promises 795; 689 arrived)"
    assert lost(at(range(689)), count=795, ended=False).lost == 0  # a run that stops early has not seen the end


@pytest.mark.parametrize(
    ("name", "times", "fps", "count"),
    [
        ("rate halves", at([*range(300), *range(300, 300 + 2 * (N - 300), 2)]), 10.0, 1300),
        ("rate halves two frames before the end", at([*range(N - 3), *range(N - 3, N + 3, 2)]), 10.0, N + 3),
        ("one long, one short", at(n + n // 2 for n in range(N)), 10.0, None),
        ("5 % jitter", [n * 100.0 + random.Random(n).uniform(-5, 5) for n in range(N)], 10.0, N),
        ("30 % jitter", [n * 100.0 + random.Random(n).uniform(-30, 30) for n in range(N)], 10.0, N + 50),
        ("the container's rate is not the stream's", at(range(N)), 29.97, 3 * N),
        ("29.97 fps in milliseconds", [round(n * 1001 / 30) for n in range(N)], 29.97, N),
        ("no timestamps", [0.0] * N, 10.0, N + 5),
    ],
)
def test_variable_rates_changes_of_rate_and_wrong_container_rates_lose_nothing(name, times, fps, count):
    assert lost(times, fps, count).lost == 0, name


def test_a_phone_like_variable_rate_stream_is_told_variable():
    rng = random.Random(0)
    times, t = [], 0.0
    for _ in range(N):
        times.append(t)
        t += rng.choice([33.3, 33.4, 33.3, 40.0, 50.0, 33.3, 66.7])
    gaps = lost(times, 30.0, N + 100)
    assert gaps.variable and gaps.lost == 0


def test_each_pass_of_a_loop_counts_and_the_total_is_kept():
    gaps = FrameGaps()
    for _ in range(3):
        gaps.start_pass(10.0, 60)
        for t in at([*range(20), *range(30, 60)]):
            gaps.frame(t)
        gaps.end()
    assert gaps.lost == 30
