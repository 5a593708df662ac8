"""Soak: a pipeline as a service for a long time at its replay rate (issues #8 and #25).

Deploys a copy of the example (replay looped, detections and an annotated video written with
rotation and a small retention, so the outputs' bound is exercised) to the local target, runs it
under the supervisor (`python -m sdk service start`), samples status.json, the runtime's and the
supervisor's resident memory, each output's size on disk (finished files and the current one) and
service.log's, then stops it. Reports memory growth after warm-up (target: none), misses, shed
frames, restarts, the latency drift between the first and the last five minutes, and the largest
size each output reached against its bound (`service.retention.max_total_mb`). The last line is
one JSON record; the exit status is 1 when an output passed its bound or the service restarted.

    python tests/benchmarks/bench_soak.py [--minutes 30] [--sample-s 5]
    python tests/benchmarks/bench_soak.py --smoke     # a few seconds, the tiny test pipeline, status read in-process
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

from tools.deploy.flow import Deploy  # noqa: E402

MIB = 1 << 20
RETENTION_MB = 48  # per output, its current file included
SINKS = (
    "sinks:\n"
    "  - {kind: jsonl, path: detections.jsonl, rotate: {max_mb: 4}}\n"
    "  - {kind: video, path: annotated.mp4, rotate: {max_mb: 16, max_age_s: 60}}\n"
)
RETENTION = f"service:\n  retention: {{max_total_mb: {RETENTION_MB}, min_free_mb: 256, detections_min_free_mb: 32}}\n"
SMOKE_SINKS = (
    "sinks:\n"
    "  - {kind: jsonl, path: detections.jsonl, rotate: {max_mb: 0.004}}\n"
    "  - {kind: video, path: annotated.avi, fourcc: MJPG, rotate: {max_mb: 0.1, max_age_s: 1}}\n"
)
SMOKE_RETENTION_MB = 0.25
SMOKE_SERVICE = (
    f"service:\n  status_interval_s: 0.2\n  retention: {{max_total_mb: {SMOKE_RETENTION_MB}, min_free_mb: 0, detections_min_free_mb: 0}}\n"
)


def rss_mb(pid: int | None) -> float | None:
    if not pid:
        return None
    try:
        line = next(x for x in Path(f"/proc/{pid}/status").read_text().splitlines() if x.startswith("VmRSS"))
    except (OSError, StopIteration):
        return None
    return int(line.split()[1]) / 1024


def service(root: Path, *args: str, in_process: bool = False) -> dict:
    """`python -m sdk service ARGS` as the device runs it. `in_process` (the smoke mode's samples): `status` read by the
    same function in this process, as a local deploy reads it: a Python start-up costs more than the reading."""
    if in_process and args == ("status",):
        from sdk.service.control import SERVICE_DIR, status

        return json.loads(json.dumps(status((root / SERVICE_DIR).resolve())))
    done = subprocess.run([sys.executable, "-m", "sdk", "service", "--root", str(root), *args], capture_output=True, text=True, cwd=REPO)
    if done.returncode:
        raise SystemExit(done.stderr)
    return json.loads(done.stdout)


def output_sizes(folder: Path, names: list[str]) -> dict[str, int]:
    """Bytes on disk of each output: its finished segments and its current file."""
    sizes = {}
    for name in names:
        stem, suffix = Path(name).stem, Path(name).suffix
        files = [p for p in folder.glob(f"{stem}.*{suffix}")] + [folder / f".{stem}.current{suffix}"]
        sizes[name] = sum(p.stat().st_size for p in files if p.exists())
    return sizes


def example_pipeline(work: Path) -> Path:
    folder = work / "pipeline"
    shutil.copytree(REPO / "pipelines" / "assets", folder / "assets")
    text = (REPO / "pipelines" / "pedestrian.yaml").read_text()
    text = text.replace("late_frames: keep     # acceptance runs process every frame", "late_frames: keep\n    loop: true")
    text = text[: text.index("sinks:")] + SINKS + RETENTION + text[text.index("calibration:") :]
    (folder / "pedestrian.yaml").write_text(text)
    return folder / "pedestrian.yaml"


def smoke_pipeline(work: Path) -> Path:
    from tests.conftest import PIPELINE, tiny_yolo

    folder = work / "pipeline"
    folder.mkdir()
    tiny_yolo(folder / "tiny.onnx")
    text = PIPELINE.format(uri="synthetic://boxes?width=64&height=48&frames=1000000", rate=30, max_ms=5000)
    text = text[: text.index("sinks:")] + SMOKE_SINKS + text[text.index("budgets:") :] + SMOKE_SERVICE
    (folder / "tiny.yaml").write_text(text)
    return folder / "tiny.yaml"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=float, default=30)
    parser.add_argument("--sample-s", type=float, default=5)
    parser.add_argument("--smoke", action="store_true", help="a few seconds with the tiny pipeline: the soak's own check")
    parser.add_argument("--seconds", type=float, default=2, help="with --smoke: how long")
    args = parser.parse_args()
    if args.smoke:
        args.minutes, args.sample_s = args.seconds / 60, 0.5
    work = Path(tempfile.mkdtemp(prefix="soak-"))
    os.environ["SDK_STATE_DIR"] = str(work / "state")
    path = smoke_pipeline(work) if args.smoke else example_pipeline(work)
    bound = int((SMOKE_RETENTION_MB if args.smoke else RETENTION_MB) * MIB)
    names = ["detections.jsonl", "annotated.avi" if args.smoke else "annotated.mp4"]
    Deploy(path, "local", frames=3, report_dir=work / "deploy")()
    root = work / "state" / "targets" / "local"
    output = root / "service" / "output"
    started = service(root, "start")
    samples = []
    t0 = time.monotonic()
    try:
        while time.monotonic() - t0 < args.minutes * 60:
            time.sleep(args.sample_s)
            state = service(root, "status", in_process=args.smoke)
            runtime = state["runtime"] or {}
            logs = sum(p.stat().st_size for p in (root / "service").glob("service.log*"))
            sizes = output_sizes(output, names)
            samples.append((time.monotonic() - t0, rss_mb(runtime.get("pid")), runtime, sizes, logs, rss_mb(state["supervisor_pid"])))
    finally:
        stopped = service(root, "stop")
    warm = [s for s in samples if s[0] >= min(120, args.minutes * 60 / 4) and s[1] is not None]
    five = 300 if args.minutes >= 15 else args.minutes * 60 / 3
    first = [s[2]["window"]["p50_ms"] for s in samples if s[0] <= five and s[2].get("window", {}).get("p50_ms")]
    last = [s[2]["window"]["p50_ms"] for s in samples if s[0] >= samples[-1][0] - five and s[2].get("window", {}).get("p50_ms")]
    final = stopped["runtime"] or {}
    largest = {name: max((s[3][name] for s in samples), default=0) for name in names}
    restarts = stopped["supervisor"]["restarts"]
    print(f"soak: {args.minutes:g} min, {final.get('frames')} frames, state at stop {final.get('state')}, restarts {restarts}")
    if warm:
        print(f"memory (RSS) after warm-up: {warm[0][1]:.1f} MB -> {warm[-1][1]:.1f} MB ({warm[-1][1] - warm[0][1]:+.1f} MB)")
    print(f"misses {final.get('misses')}, shed {final.get('shed')}, errors {final.get('errors')}, dropped {final.get('dropped')}")
    if first and last:
        span = f"{five / 60:g} min"
        print(f"latency p50 (window): first {span} {statistics.median(first):.2f} ms, last {span} {statistics.median(last):.2f} ms")
    for name in names:
        print(f"output {name}: largest {largest[name] / MIB:.3f} MiB of its bound {bound / MIB:g} MiB")
    print(
        f"service.log: largest {max((s[4] for s in samples), default=0) / MIB:.3f} MiB; started: {started['supervisor']['state']}; work folder {work}"
    )
    record = {
        "minutes": args.minutes,
        "frames": final.get("frames"),
        "restarts": restarts,
        "outputs": final.get("outputs"),
        "largest_bytes": largest,
        "bound_bytes": bound,
        "log_bytes_max": max((s[4] for s in samples), default=0),
        "rss_mb": {
            "runtime_first": next((s[1] for s in samples if s[1]), None),
            "runtime_last": next((s[1] for s in reversed(samples) if s[1]), None),
            "runtime_max": max((s[1] for s in samples if s[1]), default=None),
            "supervisor_max": max((s[5] for s in samples if s[5]), default=None),
        },
        "samples": len(samples),
    }
    print(json.dumps(record))
    return 0 if all(size <= bound for size in largest.values()) and restarts == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
