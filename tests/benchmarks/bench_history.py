"""Benchmark: the run history and `sdk compare` (issue targets in brackets).

1. Indexing: what recording one finished run costs (read its report, open the history, one transaction), into a
   history that already holds runs [< 50 ms].
2. `sdk history` over 10,000 runs: the command as typed, a new process, the newest 50 shown [< 1 s].
3. `sdk compare A B` on two runs of 795 frames: the command as typed [< 2 s].
4. False alarms and power: consecutive pairs of real runs of one release on this machine, compared as they are
   (a false alarm: any figure not `same`) and with a 10 % slowdown planted in one stage of B (its timeline's stage
   times x 1.1, the later marks shifted, as release `planted`: found when that stage's p50 is `worse`), with the
   history of those runs (their run-to-run spread) and without it; and the same on synthetic series whose
   differences are known [false alarms in at most 1 of 20, the slowdown found in at least 19 of 20].

    python tests/benchmarks/bench_history.py [--runs 21] [--runs-from DIR] [--pipeline example|tiny] [--smoke]

`--runs-from DIR` reuses report folders already made (DIR/*/report.json of one release) instead of validating
`--runs` times; `--smoke` (CI) runs everything small on the tests' tiny pipeline (one validation, which deploys the
release itself, and a copy of it with its sink 5 % slower as the second run; one synthetic pair; `sdk history` and
`sdk compare` in this process: the same parser, handler and output without a Python start-up each); its numbers mean
nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import closing
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.benchmarks.smoke import tiny_pipeline  # noqa: E402

STAGES = ("preprocess", "infer", "postprocess", "sink")
SDK = [sys.executable, "-c", "import sys; sys.argv[0] = 'sdk'; from tools.cli import main; main()"]


def sdk(*args: str, in_process: bool = False) -> tuple[float, subprocess.CompletedProcess]:
    """The command as typed, in a new process; `in_process` (the smoke mode): the same command in this process (its
    parser, handler and output), without a Python start-up and its imports each time."""
    started = time.perf_counter()
    if in_process:
        import contextlib
        import io

        from tools.cli import run

        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = run(list(args))
        done = subprocess.CompletedProcess(["sdk", *args], code, out.getvalue(), err.getvalue())
    else:
        done = subprocess.run([*SDK, *args], cwd=REPO, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    return time.perf_counter() - started, done


def make_runs(count: int, pipeline: Path, frames: int | None, out: Path, deploy_first: bool = False) -> list[Path]:
    """`count` validations of one release. The release is deployed first (a 3-frame run); `deploy_first` (the smoke
    mode): the first validation deploys it itself (`sdk validate --deploy`), one run of the runtime fewer."""
    from tools.deploy.flow import Deploy
    from tools.validation.validate import Validate

    if not deploy_first:
        Deploy(pipeline, "local", frames=3, report_dir=out / "deploy")()
    folders = []
    for k in range(count):
        validate = Validate(pipeline, "local", frames=frames, report_dir=out / f"run{k:02d}", deploy=deploy_first and k == 0)
        folders.append(validate().report_dir)
        print(f"  run {k + 1} of {count}", file=sys.stderr, flush=True)
    return folders


def indexing_ms(folder: Path, history: Path, existing: int, count: int = 30) -> list[float]:
    """Each of `count` record_runs into a history already holding `existing` copies of the run."""
    from tools.history.record import describe, record_run
    from tools.history.store import insert_run, open_for_writing

    run, checks, stages = describe(folder)
    with closing(open_for_writing(history)) as connection:
        for k in range(existing):
            insert_run(connection, {**run, "report_dir": f"/bench/{k}"}, checks, stages)
    costs = []
    for k in range(count):
        copy = history.parent / f"copy-{k}"
        shutil.copytree(folder, copy)
        started = time.perf_counter()
        assert record_run(copy, "validate").run_id is not None
        costs.append((time.perf_counter() - started) * 1000)
    return costs


def fill_history(history: Path, folder: Path, runs: int) -> None:
    """`runs` rows like the real run in `folder`: 8 targets, 20 releases, four weeks, every verdict."""
    from tools.history.record import describe
    from tools.history.store import insert_run, open_for_writing

    run, checks, stages = describe(folder)
    rng = np.random.default_rng(0)
    with closing(open_for_writing(history)) as connection:
        for k in range(runs):
            when = f"2025-01-{1 + k * 28 // runs:02d}T{k % 24:02d}:00:{k % 60:02d}.000+00:00"
            row = {**run, "report_dir": f"/bench/{k}", "target": f"orin-{k % 8:02d}", "release": f"{k * 20 // runs:016x}"}
            row.update(started_at=when, verdict=("PASS", "FAIL", "INCONCLUSIVE")[k % 3], miss_ratio=float(rng.random() * 0.01))
            varied = {s: {key: v * (1 + rng.random() * 0.1) if v else v for key, v in d.items()} for s, d in stages.items()}
            insert_run(connection, row, checks, varied)


def planted(folder: Path, stage: str, out: Path, factor: float = 0.10) -> Path:
    """A copy of the run with `stage` `factor` slower on every frame (later marks shifted), as release `planted`."""
    from sdk.runtime.timeline import read_timeline

    shutil.copytree(folder, out)
    timeline = read_timeline(folder / "timeline.npz")
    times = timeline["times_ns"].copy()
    column = 2 + list(timeline["stages"]).index(stage)  # capture, pickup, then the end of each stage
    extra = ((times[:, column] - times[:, column - 1]) * factor).astype(np.int64)
    times[:, column:] += extra[:, None]
    np.savez(out / "timeline.npz", **{**timeline, "times_ns": times})
    report = json.loads((out / "report.json").read_text())
    (out / "report.json").write_text(json.dumps({**report, "release": "planted"}))
    return out


def rates(folders: list[Path], work: Path, spreads: dict | None) -> tuple[int, dict[str, int], int]:
    from tools.history.compare import Side, compare
    from tools.history.samples import load_run

    alarms, found, named = 0, dict.fromkeys(STAGES, 0), set()
    pairs = list(zip(folders, folders[1:], strict=False))
    for k, (a, b) in enumerate(pairs):
        runs = [load_run(a), load_run(b)]
        result = compare(Side(str(a), runs[:1]), Side(str(b), runs[1:]), spreads=spreads)
        called = [f["name"] for f in result["figures"] if f["verdict"] != "same"]
        alarms += bool(called)
        named.update(called)
        for stage in STAGES:
            slow = load_run(planted(b, stage, work / f"planted-{k}-{stage}"))
            result = compare(Side(str(a), runs[:1]), Side("planted", [slow]), spreads=spreads)
            found[stage] += any(f["name"] == f"stages.{stage}.p50_ms" and f["verdict"] == "worse" for f in result["figures"])
    return alarms, found, len(pairs), sorted(named)


def real_spreads(folders: list[Path]) -> dict:
    from tools.history.compare import run_figures
    from tools.history.noise import pooled
    from tools.history.samples import load_run

    values: dict[str, list[float]] = {}
    rng = np.random.default_rng(0)
    for folder in folders:
        run = load_run(folder)
        for name, figure in run_figures(run, (run.report.get("deadline") or {}).get("deadline_ms"), rng, 10).items():
            if figure.value is not None and not name.startswith("accuracy."):
                values.setdefault(name, []).append(figure.value)
    return {name: spread for name, v in values.items() if (spread := pooled([v])) is not None}


def synthetic(pairs: int) -> tuple[int, int, int]:
    from tests.tools.history.test_stats import synthetic_run
    from tools.history.compare import Side, compare

    rng = np.random.default_rng(1)
    alarms = found = 0
    for k in range(pairs):
        a, b = synthetic_run(rng), synthetic_run(rng)
        alarms += any(f["verdict"] != "same" for f in compare(Side("a", [a]), Side("b", [b]))["figures"])
        stage = STAGES[k % 4]
        slow = synthetic_run(rng, slow=stage)
        found += any(f["name"] == f"stages.{stage}.p50_ms" and f["verdict"] == "worse" for f in compare(Side("a", [a]), Side("b", [slow]))["figures"])
    return alarms, found, pairs


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=21, help="real runs of one release (consecutive pairs are compared)")
    parser.add_argument("--runs-from", type=Path, help="reuse these report folders (DIR/*/report.json) instead of making runs")
    parser.add_argument("--keep-runs", type=Path, help="make the runs in this folder and keep them (for --runs-from)")
    parser.add_argument("--pipeline", choices=("example", "tiny"), default="example")
    parser.add_argument("--history-runs", type=int, default=10_000)
    parser.add_argument("--synthetic-pairs", type=int, default=100)
    parser.add_argument("--smoke", action="store_true", help="everything small, on the tiny pipeline (CI); its numbers mean nothing")
    args = parser.parse_args()
    if args.smoke:
        # One validation; the pair to compare (and a spread of one degree of freedom) is it and a copy of it with its
        # sink 5 % slower (as the planted slowdowns are made): a second validation would run the same code again.
        # One synthetic pair (its compares are tests/tools/history/test_stats.py's): the loop's code path once.
        args.runs, args.pipeline, args.history_runs, args.synthetic_pairs, args.runs_from = 1, "tiny", 200, 1, None
    work = Path(tempfile.mkdtemp(prefix="bench-history-"))
    os.environ.setdefault("SDK_STATE_DIR", str(work / "state"))
    os.environ["SDK_HISTORY"] = str(work / "history.sqlite")
    if args.runs_from:
        folders = sorted(p.parent for p in args.runs_from.glob("*/report.json") if (p.parent / "timeline.npz").is_file())
        folders = [f for f in folders if json.loads((f / "report.json").read_text())["measured_frames"] > 10]
    else:
        pipeline = REPO / "pipelines" / "pedestrian.yaml" if args.pipeline == "example" else tiny_pipeline(work / "tiny")
        folders = make_runs(args.runs, pipeline, 100 if args.smoke else None, args.keep_runs or work / "runs", deploy_first=args.smoke)
        if args.smoke:
            folders.append(planted(folders[0], "sink", folders[0].parent / "run01", factor=0.05))
    frames = json.loads((folders[0] / "report.json").read_text())["measured_frames"]
    print(f"{len(folders)} runs of one release, {frames} measured frames each ({folders[0].parent})")

    costs = indexing_ms(folders[0], work / "index" / "history.sqlite", 1000 if not args.smoke else 10, 30 if not args.smoke else 3)
    print(f"1. indexing a run: median {statistics.median(costs):.1f} ms, max {max(costs):.1f} ms over {len(costs)} (target < 50 ms)")

    fill_history(work / "big" / "history.sqlite", folders[0], args.history_runs)
    repeats = 1 if args.smoke else 3  # each a new process (its imports included); one shows the code path
    where = "in this process (smoke)" if args.smoke else "a new process, imports included"
    times = []
    for _ in range(repeats):
        seconds, done = sdk("history", "--history", str(work / "big" / "history.sqlite"), in_process=args.smoke)
        assert done.returncode == 0, done.stderr
        times.append(seconds)
    filters = ("--target", "orin-03", "--since", "2025-01-20")
    seconds, done = sdk("history", "--history", str(work / "big" / "history.sqlite"), *filters, in_process=args.smoke)
    assert done.returncode == 0, done.stderr
    print(f"2. sdk history over {args.history_runs} runs: {min(times):.2f} s best of {repeats} ({', '.join(f'{t:.2f}' for t in times)}); "
          f"filtered by target and time {seconds:.2f} s (target < 1 s; {where})")  # fmt: skip

    times = []
    for _ in range(repeats):
        seconds, done = sdk("compare", str(folders[0]), str(folders[1]), "--json", in_process=args.smoke)
        assert done.returncode == 0, done.stderr
        times.append(seconds)
    print(f"3. sdk compare of two {frames}-frame runs: {min(times):.2f} s best of {repeats} ({', '.join(f'{t:.2f}' for t in times)}) (target < 2 s)")

    spreads = real_spreads(folders)
    for label, known in (("with the history's run-to-run spread", spreads), ("frames alone (no history)", None)):
        alarms, found, pairs, named = rates(folders, work / label.split()[0], known)
        detail = ", ".join(f"{stage} {n}/{pairs}" for stage, n in found.items())
        print(f"4. real runs, {label}: false alarms {alarms}/{pairs} ({', '.join(named) or 'none'}); 10 % slowdown found: {detail}")
    p50s = ", ".join(f"{n.split('.')[-2]} {s.sd:.3f}" for n, s in spreads.items() if n.endswith("p50_ms"))
    print(f"   run-to-run spread of the p50s (log sd): {p50s}")
    alarms, found, pairs = synthetic(args.synthetic_pairs)
    print(f"4. synthetic series (795 frames, AR(1), spikes): false alarms {alarms}/{pairs}; 10 % slowdown of one stage found {found}/{pairs}")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
