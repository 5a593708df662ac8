"""The fixed cost of a device process start: CPU-s of one `python -B -m sdk ROLE ...`, median of N starts.

Every service start and restart, every deploy step on a device starts such a process, and each one reads the
release's `sdk` bytecode where the release carries it, else compiles it from source (`-B`, decisions 1172, 1240),
imports what its role needs and loads the pipeline where the role reads it. Measured against a local target's store
after a deploy:

    SDK_STATE_DIR=/tmp/s python -m tools.cli deploy --target local pipelines/pedestrian.yaml --frames 10
    python tests/benchmarks/bench_start.py --root /tmp/s/targets/local --starts 10

Prints one line a role: the median and range of the CPU seconds (user + system) of the process and its children.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def cpu_of(argv: list[str], cwd: Path, env: dict) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=300)
    if done.returncode not in (0, 4):  # 4: `run`'s verdict (a 3-frame run cannot meet its budgets), not a failed start
        raise SystemExit(f"{' '.join(argv)}: exit {done.returncode}: {done.stderr[-300:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def roles(root: Path, release: Path, reports: Path) -> dict[str, list[str]]:
    return {
        "python -B -c pass (the interpreter alone)": ["-c", "pass"],
        "sdk run --frames 3 (a health check's start)": ["-m", "sdk", "run", "--release", str(release), "--report-dir", str(reports), "--frames", "3"],
        "sdk service unit": ["-m", "sdk", "service", "--root", str(root), "unit"],
        "sdk service status": ["-m", "sdk", "service", "--root", str(root), "status"],
        "sdk store status": ["-m", "sdk", "store", "--root", str(root), "status"],
        "sdk store startable": ["-m", "sdk", "store", "--root", str(root), "startable"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", type=Path, help="a local target's store (SDK_STATE_DIR/targets/local)")
    parser.add_argument("--starts", type=int, default=10)
    parser.add_argument("--smoke", action="store_true", help="one start of each role an empty store answers (no release): the script's own check")
    args = parser.parse_args()
    if args.smoke:
        args.root, args.starts = Path(tempfile.mkdtemp(prefix="bench-start-")), 1
    elif args.root is None:
        parser.error("--root is required (or --smoke)")
    root = args.root.resolve()
    release = (root / "current").resolve()  # the release a start runs
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    agent = {**env, "PYTHONPATH": str(REPO)}  # the store's and the service's commands: this checkout's `sdk`, as the agent's copy
    with tempfile.TemporaryDirectory() as reports:
        for name, tail in roles(root, release, Path(reports)).items():
            own = "sdk run" in name  # a release runs from its own folder, with its own `sdk`
            if args.smoke and (own or "unit" in name or "startable" in name):
                print(f"{name:45s} skipped (--smoke: an empty store has no release)")
                continue
            times = [cpu_of([sys.executable, "-B", *tail], release if own else root, env if own else agent) for _ in range(args.starts)]
            print(f"{name:45s} median {statistics.median(times):.3f} CPU-s (min {min(times):.3f}, max {max(times):.3f}, {args.starts} starts)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
