"""The regression gate's tolerance, at its boundary: a slowdown of half the tolerance passes, one of one and a half
times it and of three times it fails, on synthetic replicates whose spread is far smaller than those steps (so
the verdict is the tolerance's, not the noise's); and the gate itself, in process, on a history of synthetic runs
(report folders with their per-frame timelines, recorded as the commands record them): with `--max-regression 5%`
a 3 % slowdown passes and a 10 % one fails, naming the figure.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from sdk.runtime.recorder import STAGES
from sdk.runtime.timeline import TIMELINE_FILE
from tools.history.compare import Side, compare
from tools.history.gate import regression_gate
from tools.history.record import record_run
from tools.history.samples import RunSamples
from tools.history.stats import Replicates, judge, verdict_of

TOLERANCE = 0.05
SPREAD = 0.001  # the replicates' relative spread: their intervals are a few tenths of the tolerance wide


def replicates(value: float, seed: int) -> Replicates:
    rng = np.random.default_rng(seed)
    return Replicates(value, value * np.exp(SPREAD * rng.standard_normal(2000)), blocks=30)


@pytest.mark.parametrize(("times", "verdict"), [(0.0, "same"), (0.5, "same"), (1.5, "worse"), (3.0, "worse")])
def test_a_slowdown_is_worse_only_beyond_the_tolerance(times, verdict):
    a = 10.0
    b = a * (1 + times * TOLERANCE)
    result = judge("stages.infer.p50_ms", replicates(a, 1), replicates(b, 2), lower_is_better=True, alpha=0.05 / 12, margin=TOLERANCE * a)
    low, high = result.interval
    assert low < b - a < high and high - low < 0.3 * TOLERANCE * a  # the interval is narrow: the tolerance decides
    assert result.verdict == verdict


@pytest.mark.parametrize(("times", "verdict"), [(0.5, "same"), (1.5, "better"), (3.0, "better")])
def test_a_speedup_is_better_only_beyond_the_tolerance(times, verdict):
    a = 10.0
    b = a * (1 - times * TOLERANCE)
    result = judge("stages.infer.p50_ms", replicates(a, 3), replicates(b, 4), lower_is_better=True, alpha=0.05 / 12, margin=TOLERANCE * a)
    assert result.verdict == verdict


@pytest.mark.parametrize(
    ("low", "high", "lower_is_better", "verdict"),
    [
        (0.51, 0.60, True, "worse"),  # the whole interval beyond the margin (0.5) on the worse side
        (0.49, 0.60, True, "same"),  # it reaches inside the margin
        (0.50, 0.60, True, "same"),  # on the margin itself: not beyond it
        (-0.60, -0.51, True, "better"),
        (-0.60, -0.50, True, "same"),
        (0.51, 0.60, False, "better"),  # higher is better (accuracy): the same interval, the other verdict
        (-0.60, -0.51, False, "worse"),
        (-0.60, -0.49, False, "same"),
    ],
)
def test_the_verdict_at_the_margin(low, high, lower_is_better, verdict):
    assert verdict_of(low, high, 0.5, lower_is_better) == verdict


# -- The gate in process, on a history of synthetic runs ------------------------------------------------------------
FRAMES = 400
MEDIANS = {"preprocess": 1.0, "infer": 15.0, "postprocess": 0.4, "sink": 3.0}
RELEASE_A, RELEASE_B = "a1a1a1a1a1a1a1a1", "b2b2b2b2b2b2b2b2"


def synthetic_folder(folder: Path, release: str, started: str, seed: int, infer_factor: float = 1.0) -> Path:
    """A run's report folder: report.json, device.json and timeline.npz of FRAMES frames, each stage log-normal around
    its median with a 2 % spread (independent frames), `infer` `infer_factor` times slower."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True)
    durations = [MEDIANS[s] * np.exp(0.02 * rng.standard_normal(FRAMES)) * (infer_factor if s == "infer" else 1.0) for s in STAGES]
    times = np.zeros((FRAMES, 2 + len(STAGES)), np.int64)
    times[:, 0] = np.arange(FRAMES) * 100_000_000  # capture: one frame every 100 ms
    times[:, 1] = times[:, 0] + 200_000  # picked up 0.2 ms later
    for i, duration in enumerate(durations):
        times[:, 2 + i] = times[:, 1 + i] + np.round(duration * 1e6).astype(np.int64)
    timeline = {"frames": np.arange(FRAMES), "times_ns": times, "digests": np.zeros(FRAMES, np.uint64), "warmup": np.int64(0)}
    np.savez(folder / TIMELINE_FILE, **timeline, stages=np.array(STAGES))
    report = {
        "release": release,
        "pipeline": "synthetic",
        "target": "local",
        "verdict": "PASS",
        "frames": FRAMES,
        "measured_frames": FRAMES,
        "run": {"started_at": started, "target": "local"},
    }
    (folder / "report.json").write_text(json.dumps(report))
    (folder / "device.json").write_text(json.dumps({"arch": "x86_64"}))
    return folder


@pytest.fixture()
def baseline(tmp_path, monkeypatch):
    """A history holding release A's deploy, as `deploy` records it."""
    monkeypatch.setenv("SDK_HISTORY", str(tmp_path / "history.sqlite"))
    folder = synthetic_folder(tmp_path / "a-deploy", RELEASE_A, "2026-11-01T10:00:00Z", seed=1)
    assert record_run(folder, "deploy").run_id is not None
    return tmp_path


@pytest.mark.parametrize("spec", ["last-committed", RELEASE_A])
def test_the_gate_passes_a_3_percent_slowdown_and_fails_a_10_percent_one_at_5_percent(baseline, spec):
    judged = {}
    for percent, seed in ((3, 2), (10, 3)):
        folder = synthetic_folder(baseline / f"b-{percent}", RELEASE_B, f"2026-11-0{1 + percent // 3}T10:00:00Z", seed, 1 + percent / 100)
        assert record_run(folder, "validate").run_id is not None
        judged[percent] = regression_gate(folder, spec, 0.05)
        assert judged[percent].skipped is None and judged[percent].comparison["min_difference"] == 0.05
        infer = next(f for f in judged[percent].comparison["figures"] if f["name"] == "stages.infer.p50_ms")
        assert infer["margin"] == pytest.approx(0.05 * infer["a"], rel=1e-4)
        assert infer["relative"] == pytest.approx(percent / 100, abs=0.01)
    assert judged[3].regressions == []
    assert judged[3].message() == f"against release {RELEASE_A} (1 run(s)), tolerance 5%: no figure regressed beyond it"
    names = [f["name"] for f in judged[10].regressions]
    assert "stages.infer.p50_ms" in names and all("infer" in n or "end_to_end" in n for n in names), names
    assert "stages.infer.p50_ms: " in judged[10].message() and "beyond the tolerance" in judged[10].message()


def test_compare_with_the_tolerance_in_process_at_3_and_10_percent(baseline):
    """`sdk compare`'s own statistics with min_difference 5 % (what --max-regression 5% passes), on the same runs."""
    from tools.history.samples import load_run

    a = Side("a", [load_run(baseline / "a-deploy")])
    for percent, seed, verdict in ((3, 4, "same"), (10, 5, "worse")):
        b_run: RunSamples = load_run(synthetic_folder(baseline / f"c-{percent}", RELEASE_B, "2026-11-05T10:00:00Z", seed, 1 + percent / 100))
        figures = {f["name"]: f for f in compare(a, Side("b", [b_run]), min_difference=0.05)["figures"]}
        assert figures["stages.infer.p50_ms"]["verdict"] == verdict
        assert figures["stages.preprocess.p50_ms"]["verdict"] == "same"
        no_tolerance = {f["name"]: f for f in compare(a, Side("b", [b_run]))["figures"]}
        assert no_tolerance["stages.infer.p50_ms"]["verdict"] == "worse"  # without one, both slowdowns are found
