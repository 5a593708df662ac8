"""Every benchmark in tests/benchmarks runs in its smoke mode (`--smoke`: one short round, tiny sizes), so a change
that breaks a benchmark script fails CI. The numbers they print mean nothing here; only that they run to the end.

The scripts run as a person runs them (`python tests/benchmarks/bench_X.py --smoke`), one test each (so the suite's
workers share them, longest first), with their temporary files, host state and targets in the test's folder."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BENCHMARKS = REPO / "tests" / "benchmarks"
# One benchmark's smoke run may take this long: a limit for a hang, not a speed. The longest, optimize (a real pruning
# and measuring of the example detector, about 60 CPU-s), took 150 to 210 s while the 2-core machine was at load 8 to
# 11, and 377 s at load 12 to 15; 900 s is more than 3 times what it takes at load 8 to 11. All 24 scripts: about 111
# CPU-s with every process they start, 3.3 minutes of wall time one after the other at load 3 to 6 (decision 1185).
TIMEOUT_S = 900
# Longest first (wall time measured one after the other, decision 1185), so the suite's workers end together; a new
# benchmark runs last.
ORDER = (
    "deploy",
    "soak",
    "optimize",
    "history",
    "report",
    "acceptance",
    "calibration",
    "live_view",
    "int8_cpu",
    "profile",
    "decoders",
    "cuda_reference",
    "multicam",
    "published",
    "evaluate",
    "runtime_overhead",
    "dla_report",
    "cuda_path",
    "replay_memory",
    "tracker",
    "recordings",
    "cuda_traffic",
    "cuda_device",
    "verify",
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


@pytest.mark.parametrize("path", benchmarks(), ids=lambda path: path.stem.removeprefix("bench_"))
def test_every_benchmark_runs_its_smoke_mode(tmp_path, path):
    missing = missing_tools(path)
    if missing and not (os.environ.get("CI") or os.environ.get("SDK_CI")):
        pytest.skip(f"{path.name} needs {', '.join(missing)} (apt-get install it)")
    _, code, output, seconds = run_smoke(path, tmp_path / path.stem)
    assert code is not None, f"{path.name} --smoke: did not finish within {TIMEOUT_S} s\n{output}"
    assert code == 0, f"{path.name} --smoke: exit {code} after {seconds:.0f} s\n{output}"


def test_every_benchmark_is_collected():
    assert len(benchmarks()) >= 20 and all(path.name.startswith("bench_") for path in benchmarks())
