"""Soak: the example pipeline as a service for a long time at its replay rate (issue #8).

Deploys a copy of the example (replay looped, null sink so the disk does not fill) to the local
target, runs it under the supervisor (`python -m sdk service start`), samples status.json and the
runtime's resident memory every few seconds, then stops it. Reports memory growth after warm-up
(target: none), misses, shed frames, restarts, and the latency drift between the first and the
last five minutes (sliding-window p50/p99 as the runtime reports them).

    python tests/benchmarks/bench_soak.py [--minutes 30] [--sample-s 5] [--smoke]
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
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tools.deploy import Deploy  # noqa: E402


def rss_mb(pid: int) -> float | None:
    try:
        line = next(x for x in Path(f"/proc/{pid}/status").read_text().splitlines() if x.startswith("VmRSS"))
    except (OSError, StopIteration):
        return None
    return int(line.split()[1]) / 1024


def service(root: Path, *args: str) -> dict:
    done = subprocess.run([sys.executable, "-m", "sdk", "service", "--root", str(root), *args], capture_output=True, text=True, cwd=REPO)
    if done.returncode:
        raise SystemExit(done.stderr)
    return json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=float, default=30)
    parser.add_argument("--sample-s", type=float, default=5)
    parser.add_argument("--smoke", action="store_true", help="one short round with tiny sizes: proves the script runs (CI); its numbers mean nothing")
    args = parser.parse_args()
    if args.smoke:
        args.minutes, args.sample_s = 0.05, 1.0
    work = Path(tempfile.mkdtemp(prefix="soak-"))
    os.environ["SDK_STATE_DIR"] = str(work / "state")
    folder = work / "pipeline"
    shutil.copytree(REPO / "pipelines" / "assets", folder / "assets")
    text = (REPO / "pipelines" / "pedestrian.yaml").read_text()
    text = text.replace("late_frames: keep     # acceptance runs process every frame", "late_frames: keep\n    loop: true")
    text = text[: text.index("sinks:")] + "sinks:\n  - {kind: null}\n" + text[text.index("calibration:") :]
    (folder / "pedestrian.yaml").write_text(text)
    Deploy(folder / "pedestrian.yaml", "local", frames=3, report_dir=work / "deploy")()
    root = work / "state" / "targets" / "local"
    started = service(root, "start")
    samples = []
    t0 = time.monotonic()
    try:
        while time.monotonic() - t0 < args.minutes * 60:
            time.sleep(args.sample_s)
            state = service(root, "status")
            runtime = state["runtime"] or {}
            pid = runtime.get("pid")
            samples.append((time.monotonic() - t0, rss_mb(pid) if pid else None, runtime))
    finally:
        stopped = service(root, "stop")
    warm = [s for s in samples if s[0] >= min(120, args.minutes * 60 / 4) and s[1] is not None]
    five = 300 if args.minutes >= 15 else args.minutes * 60 / 3
    first = [s[2]["window"]["p50_ms"] for s in samples if s[0] <= five and s[2].get("window", {}).get("p50_ms")]
    last = [s[2]["window"]["p50_ms"] for s in samples if s[0] >= samples[-1][0] - five and s[2].get("window", {}).get("p50_ms")]
    final = stopped["runtime"] or {}
    print(
        f"soak: {args.minutes:g} min, {final.get('frames')} frames, state at stop {final.get('state')}, restarts {stopped['supervisor']['restarts']}"
    )
    if warm:
        print(f"memory (RSS) after warm-up: {warm[0][1]:.1f} MB -> {warm[-1][1]:.1f} MB ({warm[-1][1] - warm[0][1]:+.1f} MB)")
    print(f"misses {final.get('misses')}, shed {final.get('shed')}, errors {final.get('errors')}, dropped {final.get('dropped')}")
    if first and last:
        span = f"{five / 60:g} min"
        print(f"latency p50 (window): first {span} {statistics.median(first):.2f} ms, last {span} {statistics.median(last):.2f} ms")
    print(f"started: {started['supervisor']['state']}; work folder {work}")


if __name__ == "__main__":
    main()
