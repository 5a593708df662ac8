"""`python -m sdk run`: the runtime's own command line, on the device or in a local target.

It runs one release (or a pipeline with prepared artifacts), writes report.json and the
sinks' files into --report-dir, and prints progress as JSON lines on stdout for the host
to read (`--events`). Exit codes: the verdict's (0 PASS, 3 FAIL, 4 INCONCLUSIVE), 1 for an error.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from contextlib import nullcontext
from pathlib import Path

from sdk.errors import EXIT_BUDGET_FAIL, EXIT_INCONCLUSIVE, EXIT_PASS
from sdk.release import MANIFEST, sha256_of
from sdk.runtime import environment
from sdk.runtime.arguments import add_what_runs, what_runs
from sdk.runtime.interference import Interference, InterferencePlan
from sdk.runtime.junit import write_junit
from sdk.runtime.report import build_report, command_line, utc_now, write_report
from sdk.runtime.runner import PipelineRunner
from sdk.runtime.timeline import write_timeline

VERDICT_EXIT = {"PASS": EXIT_PASS, "FAIL": EXIT_BUDGET_FAIL, "INCONCLUSIVE": EXIT_INCONCLUSIVE}


def _emit(event: dict) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def _arguments(argv: list[str]) -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    """The command line, checked."""
    parser = argparse.ArgumentParser(prog="python -m sdk run", description="Run a release of a pipeline and report.")
    add_what_runs(parser)
    parser.add_argument("--report-dir", type=Path, required=True)
    parser.add_argument("--frames", type=int, default=None)
    parser.add_argument("--target", default="local")
    parser.add_argument("--events", action="store_true", help="print JSON progress events on stdout")
    parser.add_argument("--stress", default=None, help="interference during the run, e.g. cpu=2,memory=1,memory_mb=256")
    parser.add_argument("--live-view", type=int, default=None, metavar="PORT", help="serve the Foxglove live view on PORT; none otherwise")
    parser.add_argument(
        "--evaluate",
        type=Path,
        default=None,
        metavar="DIR",
        help="an evaluation run: replay the images in DIR once at the pipeline's evaluation settings, detections.jsonl exact",
    )
    args = parser.parse_args(argv)
    if args.frames is not None and args.frames < 1:
        parser.error("--frames must be at least 1")
    if args.live_view is not None and not 1 <= args.live_view <= 65535:
        parser.error(f"--live-view {args.live_view}: not a TCP port; allowed: 1 to 65535")
    return parser, args


def run(argv: list[str]) -> int:
    parser, args = _arguments(argv)
    release_id, pipeline, artifacts = what_runs(parser, args)  # only checked bytes of a release that may run here
    images = args.evaluate.resolve() if args.evaluate is not None else None
    if images is not None:
        from sdk.runtime.evaluation_run import evaluation_run

        pipeline = evaluation_run(pipeline, images)

    each = [args.frames or camera.replay.frames for camera in pipeline.spec.cameras.values()]
    total = sum(each) if all(each) else None
    last = [0.0]

    def on_frame(count: int) -> None:
        now = time.monotonic()
        if now - last[0] >= 0.2:
            last[0] = now
            _emit({"event": "progress", "frames": count, "total": total})

    # A measuring run serves the live view only when asked (--live-view), whatever the pipeline's foxglove sink says.
    runner = PipelineRunner(
        pipeline,
        artifacts,
        args.report_dir,
        max_frames=args.frames,
        on_frame=on_frame if args.events else None,
        live_view=args.live_view,
        images=images,
    )
    # SIGTERM ends the run like the end of the stream: sinks and the report are still written.
    signal.signal(signal.SIGTERM, lambda *_: runner.stop())
    if args.events:
        _emit({"event": "started", "pipeline": pipeline.spec.name, "release": release_id, "total": total})
    plan = InterferencePlan.parse(args.stress) if args.stress else None
    before = environment.capture()
    started_at = utc_now()
    with Interference(plan) if plan else nullcontext(), environment.LoadMonitor() as load:
        result = runner.run()
    finished_at = utc_now()
    after = environment.capture()
    run_info = {
        "started_at": started_at,
        "finished_at": finished_at,
        "command": command_line(["python", "-m", "sdk", "run", *argv]),
        "release_manifest_sha256": sha256_of(args.release / MANIFEST) if args.release is not None else None,
    }
    report = build_report(
        pipeline,
        result,
        target=args.target,
        release=release_id,
        artifacts=artifacts,
        environment=(before, after),
        interference=plan.describe() if plan else None,
        run=run_info,
        load=load.summary(),
    )
    write_timeline(result.recorder, report["warmup_frames"], args.report_dir)
    path = write_report(report, args.report_dir)
    write_junit(report, args.report_dir)
    if args.events:
        _emit({"event": "finished", "frames": result.frames, "report": str(path), "verdict": report["verdict"]})
    return VERDICT_EXIT[report["verdict"]]
