"""Benchmark: the cost of recording a frame, and the example's verdict idle vs under interference.

1. Recorder: per frame the runtime takes six monotonic clock readings, hashes the frame's
   detections and stores one row. Measured against a bare loop of the same length, side by side,
   in alternating rounds (this machine is noisy); the median difference is reported.
   Target (issue #7): < 20 us per frame.
2. Verdict: `sdk validate` on the example pipeline (local target), idle and with
   `--stress cpu=2,memory=1`, alternating; p50/p99 end to end, misses and the verdict of each.
   `--smoke` runs the stressed validation only, on the tests' tiny pipeline (tests/conftest.py), deploying the
   release itself (`sdk validate --deploy`) instead of a deploy before it.

    python tests/benchmarks/bench_acceptance.py [--records 200000] [--rounds 5] [--frames 330] [--runs 2] [--stress SPEC] [--smoke]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from sdk.postprocess.detections import Detections  # noqa: E402
from sdk.runtime.recorder import LatencyRecorder  # noqa: E402
from tests.benchmarks.smoke import tiny_pipeline  # noqa: E402


def recorder_cost_us(records: int, rounds: int) -> tuple[float, list[float]]:
    detections = Detections(100, ("person",))
    detections.count = 8  # a typical frame of the example: a handful of people
    detections.boxes[:8] = np.random.default_rng(0).uniform(0, 700, (8, 4))
    recorder = LatencyRecorder(1 << 16)
    clock = time.monotonic_ns
    marks = [0] * 6

    def recording() -> float:
        start = time.perf_counter()
        for i in range(records):
            marks[0] = clock()
            marks[1] = clock()
            marks[2] = clock()
            marks[3] = clock()
            marks[4] = clock()
            marks[5] = clock()
            recorder.record(i, marks, detections.digest())
        return time.perf_counter() - start

    def bare() -> float:
        start = time.perf_counter()
        for i in range(records):
            marks[0] = i
        return time.perf_counter() - start

    differences = []
    for _ in range(rounds):
        differences.append((recording() - bare()) / records * 1e6)
    return statistics.median(differences), differences


def verdicts(frames: int, runs: int, stress: str, idle: bool = True, tiny: bool = False) -> list[tuple[str, dict]]:
    from tools.deploy.flow import Deploy
    from tools.validation.validate import Validate

    os.environ.setdefault("SDK_STATE_DIR", tempfile.mkdtemp(prefix="bench-acceptance-"))
    pipeline = tiny_pipeline(Path(tempfile.mkdtemp(prefix="bench-acceptance-tiny-"))) if tiny else REPO / "pipelines" / "pedestrian.yaml"
    if not tiny:  # the smoke mode's one validation deploys the release itself (`sdk validate --deploy`): one run fewer
        Deploy(pipeline, "local", frames=3, report_dir=Path(tempfile.mkdtemp()))()
    out = []
    for _ in range(runs):
        for label, load in (("idle", None), (f"stress {stress}", stress))[0 if idle else 1 :]:
            result = Validate(pipeline, "local", frames=frames, stress=load, report_dir=Path(tempfile.mkdtemp()), deploy=tiny and not out)()
            out.append((label, result.report))
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--frames", type=int, default=330)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--stress", default="cpu=2,memory=1,memory_mb=128")
    parser.add_argument("--smoke", action="store_true", help="one short round with tiny sizes: proves the script runs (CI); its numbers mean nothing")
    args = parser.parse_args()
    if args.smoke:
        args.records, args.rounds, args.frames, args.runs, args.stress = 2000, 1, 12, 1, "cpu=1,memory_mb=16"
    median, rounds = recorder_cost_us(args.records, args.rounds)
    print(f"recorder: {median:.2f} us per frame (rounds: {', '.join(f'{r:.2f}' for r in rounds)}); target < 20 us")
    print(f"{'run':<24}{'p50 ms':>9}{'p99 ms':>9}{'p99 upper':>11}{'misses':>8}{'streak':>8}  verdict")
    for label, report in verdicts(args.frames, args.runs, args.stress, idle=not args.smoke, tiny=args.smoke):  # smoke: the stressed run only
        e2e, deadline = report["end_to_end"], report["deadline"] or {}
        upper = e2e["bounds"].get("p99_ms", [None, None])[1]
        upper_text = "-" if upper is None else f"{upper:.2f}"
        misses, streak = deadline.get("misses", "-"), deadline.get("longest_streak", "-")
        print(f"{label:<24}{e2e['p50_ms']:>9.2f}{e2e['p99_ms']:>9.2f}{upper_text:>11}{misses!s:>8}{streak!s:>8}  {report['verdict']}")


if __name__ == "__main__":
    main()
