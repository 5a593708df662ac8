"""Latency recording and the verdict: order statistics, sample-size rules, FAIL / INCONCLUSIVE / PASS."""

from __future__ import annotations

import numpy as np
import pytest

from sdk.runtime.recorder import LatencyRecorder
from sdk.runtime.verdict import FAIL, INCONCLUSIVE, PASS, evaluate, frames_needed, summarize
from sdk.spec.schema import Budgets


def test_frames_needed_for_a_95_percent_bound():
    assert frames_needed(0.5) == 5
    assert frames_needed(0.99) == 299
    assert frames_needed(0.999) == 2995
    assert frames_needed(1.0) == 1
    # The rule: the sample maximum bounds the quantile once 1 - q^n >= 0.95.
    assert 1 - 0.99**299 >= 0.95 > 1 - 0.99**298


def test_percentiles_are_measured_order_statistics():
    values = np.arange(1, 101, dtype=float)  # 1 .. 100 ms
    stats = summarize(values, ("p50_ms", "p99_ms", "p999_ms", "max_ms"))
    assert (stats["p50_ms"], stats["p99_ms"], stats["p999_ms"], stats["max_ms"]) == (50, 99, 100, 100)
    assert stats["mean_ms"] == 50.5
    assert summarize(np.array([]))["p99_ms"] is None


def test_recorder_keeps_the_newest_frames_in_order():
    recorder = LatencyRecorder(capacity=4)
    for i in range(6):
        t = 1_000_000 * i
        recorder.record(i, [t, t + 100, t + 200, t + 400, t + 700, t + 1100], digest=100 + i)
    frames, times, digests = recorder.rows()
    assert frames.tolist() == [2, 3, 4, 5] and recorder.count == 6 and digests.tolist() == [102, 103, 104, 105]
    lat = recorder.latencies_ms(skip=1)
    assert np.allclose(lat["preprocess"], 0.0001) and np.allclose(lat["sink"], 0.0004)
    assert np.allclose(lat["queue"], 0.0001) and np.allclose(lat["end_to_end"], 0.0011) and len(lat["infer"]) == 3


def latencies(e2e, infer=None):
    e2e = np.asarray(e2e, float)
    return {"end_to_end": e2e, "infer": np.asarray(infer if infer is not None else e2e / 2, float)}


def test_pass_fail_and_inconclusive():
    budgets = Budgets(end_to_end={"p99_ms": 30, "max_ms": 100}, stages={"infer": {"p50_ms": 10}})
    verdict, checks, notes = evaluate(budgets, latencies(np.full(300, 20.0)), dropped=0)
    assert verdict == PASS and [c.status for c in checks] == [PASS, PASS, PASS]
    slow = np.full(300, 20.0)
    slow[-10:] = 40.0  # 10 of 300 over the p99 budget: p99 = 40
    verdict, checks, _ = evaluate(budgets, latencies(slow), dropped=0)
    assert verdict == FAIL and checks[0].measured == 40.0 and checks[0].status == FAIL
    verdict, checks, notes = evaluate(budgets, latencies(np.full(100, 20.0)), dropped=0)
    assert verdict == INCONCLUSIVE and checks[0].status == INCONCLUSIVE
    assert "100 frame(s) measured, 299 needed" in notes[0]


def test_a_measured_value_over_the_budget_fails_at_any_sample_size():
    budgets = Budgets(end_to_end={"p99_ms": 30, "max_ms": 100})
    verdict, checks, _ = evaluate(budgets, latencies([10, 10, 150]), dropped=0)
    assert verdict == FAIL and [c.status for c in checks] == [FAIL, FAIL]
    verdict, checks, _ = evaluate(budgets, latencies([10, 10, 20]), dropped=0)
    assert verdict == INCONCLUSIVE and [c.status for c in checks] == [INCONCLUSIVE, PASS]


def test_dropped_frames_budget_and_no_budgets():
    verdict, checks, _ = evaluate(Budgets(max_dropped=2), latencies([1.0]), dropped=3)
    assert verdict == FAIL and checks[0].name == "dropped" and checks[0].measured == 3
    verdict, checks, notes = evaluate(Budgets(), latencies([1.0]), dropped=0)
    assert verdict == INCONCLUSIVE and checks == [] and "no budgets" in notes[0]


def test_recorder_rejects_zero_capacity():
    with pytest.raises(ValueError):
        LatencyRecorder(0)


def test_inconclusive_when_within_budget_but_the_bound_is_not():
    values = np.full(1000, 20.0)
    values[-8:] = 45.0  # p99 measured 20 ms, but 8 slow frames put the 95 % upper bound (rank 995) at 45 ms
    verdict, checks, notes = evaluate(Budgets(end_to_end={"p99_ms": 30}), latencies(values), dropped=0)
    check = checks[0]
    assert (verdict, check.measured, check.bound) == (INCONCLUSIVE, 20.0, 45.0)
    assert check.frames_needed > 1000 and "upper bound 45" in notes[0]


def test_deadline_miss_ratio_and_streak_budgets():
    from sdk.runtime.statistics import deadline_misses

    budgets = Budgets(deadline_ms=33.3, max_miss_ratio=0.01, max_consecutive_misses=2)
    e2e = np.full(1000, 10.0)
    frames = np.arange(1000)
    verdict, checks, _ = evaluate(budgets, latencies(e2e), 0, deadline_misses(frames, e2e, 33.3))
    assert verdict == PASS and [c.name for c in checks] == ["deadline.miss_ratio", "deadline.consecutive_misses"]
    e2e[500:503] = 50.0  # three late frames in a row: ratio fine, streak over
    verdict, checks, _ = evaluate(budgets, latencies(e2e), 0, deadline_misses(frames, e2e, 33.3))
    assert verdict == FAIL and [c.status for c in checks] == [PASS, FAIL] and checks[1].measured == 3
    few = np.full(100, 10.0)  # no miss in 100 frames does not bound a 1 % rate: 299 would
    verdict, checks, _ = evaluate(budgets, latencies(few), 0, deadline_misses(np.arange(100), few, 33.3))
    assert verdict == INCONCLUSIVE and checks[0].frames_needed == 299


def test_jitter_and_drift_budgets():
    rising = np.linspace(10, 30, 3000)
    budgets = Budgets(max_jitter_ms=25, max_drift_ms=5)
    verdict, checks, _ = evaluate(budgets, latencies(rising), 0)
    assert [c.name for c in checks] == ["end_to_end.jitter_ms", "end_to_end.drift_ms"]
    assert checks[0].status == PASS and checks[1].status == FAIL and checks[1].measured == pytest.approx(13.33, abs=0.01)


def test_miss_budgets_need_a_deadline():
    with pytest.raises(ValueError, match="deadline_ms"):
        Budgets(max_consecutive_misses=1)


RESIDENT_PROBE = """
import json
from sdk.runtime.recorder import LatencyRecorder

def resident_mb():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS")) / 1024

before = resident_mb()
recorder = LatencyRecorder(1 << 18)  # 16 MiB of rows
allocated = resident_mb()
for index in range(1 << 18):
    recorder.record(index, [1, 2, 3, 4, 5, 6], index)
print(json.dumps([before, allocated, resident_mb()]))
"""


def test_the_recorder_is_resident_from_the_start_and_does_not_grow_while_recording():
    """A lazily committed ring grew the service by 64 bytes a frame for 36 minutes (the soak).
    In a fresh process: a long-lived one may hand the arrays memory that is already resident."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[3]
    done = subprocess.run([sys.executable, "-c", RESIDENT_PROBE], capture_output=True, text=True, cwd=repo, check=True)
    before, allocated, after = json.loads(done.stdout)
    assert allocated - before > 14
    assert after - allocated < 2


def test_one_failed_check_fails_the_run_whatever_else_is_inconclusive_or_passes():
    """FAIL outranks INCONCLUSIVE outranks PASS: 100 frames cannot bound a p99 (inconclusive), but their maximum is over
    its budget (a failure), and the dropped frames are within theirs (a pass): the run fails."""
    budgets = Budgets(end_to_end={"p99_ms": 30, "max_ms": 100}, max_dropped=5)
    values = np.full(100, 20.0)
    values[50] = 150.0
    verdict, checks, notes = evaluate(budgets, latencies(values), dropped=0)
    assert [c.status for c in checks] == [INCONCLUSIVE, FAIL, PASS]
    assert verdict == FAIL
    verdict, checks, _ = evaluate(Budgets(end_to_end={"p99_ms": 30}, max_dropped=5), latencies(np.full(100, 20.0)), dropped=0)
    assert [c.status for c in checks] == [INCONCLUSIVE, PASS] and verdict == INCONCLUSIVE


def test_a_miss_ratio_just_over_its_budget_fails_and_one_at_it_does_not():
    """The measured ratio over `max_miss_ratio` fails at any sample size; at the budget it cannot fail (inconclusive:
    its upper bound is over), and far below it with enough frames it passes."""
    from sdk.runtime.statistics import deadline_misses

    budgets = Budgets(deadline_ms=33.3, max_miss_ratio=0.01)
    frames = np.arange(1000)
    for late, status in ((11, FAIL), (10, INCONCLUSIVE), (1, PASS)):
        e2e = np.full(1000, 10.0)
        e2e[np.arange(late) * 50] = 50.0  # `late` frames spread out: no streak
        verdict, checks, _ = evaluate(budgets, latencies(e2e), 0, deadline_misses(frames, e2e, 33.3))
        assert (verdict, checks[0].status, checks[0].measured) == (status, status, late / 1000), late
        if status == FAIL:
            assert checks[0].detail == f"{late} of 1000 frames missed"
