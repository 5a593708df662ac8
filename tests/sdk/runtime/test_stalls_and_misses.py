"""Timing that cannot hide stalls: a paced replay, a stage that stalls, and the misses it must cause."""

from __future__ import annotations

import time

import numpy as np

from sdk.runtime import PipelineRunner
from sdk.runtime.statistics import deadline_misses
from sdk.runtime.verdict import FAIL, evaluate
from sdk.spec.schema import Budgets


def test_one_200_ms_stall_shows_in_the_frames_behind_it(tiny_pipeline, tmp_path, postprocess_hook):
    """Coordinated omission: latency is measured from each frame's scheduled time, so the frames
    queued behind a stall carry it too; a harness timing from pickup would show one slow frame."""
    pipeline, artifacts = tiny_pipeline(frames=30, rate=30)
    postprocess_hook(lambda call: time.sleep(0.2 if call == 10 else 0.0))
    result = PipelineRunner(pipeline, artifacts, tmp_path / "out").run()
    e2e = result.recorder.latencies_ms()["end_to_end"]
    frames = result.recorder.rows()[0]
    assert frames.tolist() == list(range(30))
    assert e2e[9] >= 200
    # Frame 10 was due 33 ms after frame 9 and waited for the stall: about 167 ms late, 11 about 133 ...
    assert e2e[10] >= 150 and e2e[11] >= 110 and e2e[12] >= 80
    behind = (e2e[10:] > 33.3).sum()
    assert behind >= 4  # the backlog drains over several frames, all of them visibly late
    pickup = result.recorder.latencies_ms()
    assert pickup["queue"][10] >= 150  # the wait happened before the pipeline took the frame


def test_a_slow_stage_is_caught_as_misses_and_a_streak(tiny_pipeline, tmp_path, postprocess_hook):
    pipeline, artifacts = tiny_pipeline(frames=40, rate=30)
    postprocess_hook(lambda call: time.sleep(0.06 if 20 <= call < 24 else 0.0))
    result = PipelineRunner(pipeline, artifacts, tmp_path / "out").run()
    latencies = result.recorder.latencies_ms()
    frames = result.recorder.rows()[0]
    misses = deadline_misses(frames, latencies["end_to_end"], deadline_ms=40)
    assert misses.late >= 4 and misses.longest_streak >= 4 and misses.dropped == 0
    budgets = Budgets(deadline_ms=40, max_consecutive_misses=2)
    verdict, checks, _ = evaluate(budgets, latencies, result.counters.dropped, misses)
    assert verdict == FAIL and checks[0].name == "deadline.consecutive_misses" and checks[0].measured == misses.longest_streak
    assert np.median(latencies["end_to_end"][:15]) < 40  # before the slow stage, the budget held
