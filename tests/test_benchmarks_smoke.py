"""Every benchmark in tests/benchmarks runs in its smoke mode (`--smoke`: one short round, tiny sizes), so a change
that breaks a benchmark script fails CI. The numbers they print mean nothing here; only that they run to the end.

The scripts run as a person runs them (`python tests/benchmarks/bench_X.py --smoke`), two at a time, longest
first, with their temporary files, host state and targets in this test's folder."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BENCHMARKS = REPO / "tests" / "benchmarks"
# One benchmark's smoke run may take this long: a limit for a hang, not a speed. The longest, optimize (a real pruning
# and measuring of the example detector, about 60 CPU-s), took 150 to 210 s while the 2-core machine was at load 8 to
# 11, and 377 s at load 12 to 15; 900 s is more than 3 times what it takes at load 8 to 11. The whole test, two
# scripts at a time: about 5 minutes at load 6.5, 9.5 at load 12 to 15.
TIMEOUT_S = 900
# Longest first (measured), so the two workers end together; a new benchmark runs last.
ORDER = (
    "deploy",
    "soak",
    "optimize",
    "acceptance",
    "calibration",
    "int8_cpu",
    "decoders",
    "cuda_reference",
    "multicam",
    "runtime_overhead",
    "dla_report",
    "cuda_path",
    "tracker",
    "cuda_traffic",
    "cuda_device",
)
# System tools a benchmark needs, and the package that has them (.ci/run installs them).
NEEDS = {"cuda_reference": {"cmake": "cmake", "g++": "g++"}, "deploy": {"scp": "openssh-client", "ssh-keygen": "openssh-client"}}


def benchmarks() -> list[Path]:
    found = sorted(BENCHMARKS.glob("bench_*.py"))
    rank = {name: k for k, name in enumerate(ORDER)}
    return sorted(found, key=lambda path: rank.get(path.stem.removeprefix("bench_"), len(ORDER)))


def missing_tools(path: Path) -> list[str]:
    needs = NEEDS.get(path.stem.removeprefix("bench_"), {})
    return [f"{tool} ({package})" for tool, package in needs.items() if shutil.which(tool) is None]


def run_smoke(path: Path, folder: Path) -> tuple[Path, int | None, str, float]:
    folder.mkdir(parents=True)
    env = {
        **os.environ,
        "TMPDIR": str(folder),  # the scripts' mkdtemp() folders
        "SDK_STATE_DIR": str(folder / "state"),
        "SDK_TARGETS_DIR": str(folder / "targets"),
        "MPLBACKEND": "Agg",
    }
    started = time.monotonic()
    try:
        done = subprocess.run(
            [sys.executable, str(path), "--smoke"], cwd=REPO, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=TIMEOUT_S
        )
    except subprocess.TimeoutExpired as exc:
        output = (exc.stdout or b"").decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        return path, None, output[-2000:], time.monotonic() - started
    return path, done.returncode, (done.stdout + done.stderr)[-2000:], time.monotonic() - started


def test_every_benchmark_runs_its_smoke_mode(tmp_path):
    scripts, skipped = [], []
    for path in benchmarks():
        missing = missing_tools(path)
        if missing and not (os.environ.get("CI") or os.environ.get("SDK_CI")):
            skipped.append(f"{path.name}: needs {', '.join(missing)}")
        else:
            scripts.append(path)
    assert scripts, "no benchmarks found"
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda path: run_smoke(path, tmp_path / path.stem), scripts))
    failures = []
    for path, code, output, seconds in results:
        if code is None:
            failures.append(f"{path.name} --smoke: did not finish within {TIMEOUT_S} s\n{output}")
        elif code != 0:
            failures.append(f"{path.name} --smoke: exit {code} after {seconds:.0f} s\n{output}")
    timings = ", ".join(f"{path.stem.removeprefix('bench_')} {seconds:.0f} s" for path, _, _, seconds in results)
    print(f"smoke runs: {timings}")  # shown with -s: where the time goes
    assert not failures, "\n\n".join(failures)
    if skipped:
        warnings.warn("benchmarks not run for lack of a system tool (apt-get install it): " + "; ".join(skipped), stacklevel=1)
