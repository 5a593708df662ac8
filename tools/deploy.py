"""`deploy --target T PIPELINE`: validate, prepare, stage the release, run it there, report.

Nothing reaches the target before the pipeline file has validated and the model has been
prepared, so a bad file leaves the target untouched.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from sdk.errors import EXIT_BUDGET_FAIL, EXIT_INCONCLUSIVE, EXIT_PASS, SdkError
from sdk.runtime.report import REPORT_FILE
from sdk.spec.loader import PipelineFile, load_pipeline
from sdk.store import ReleaseStore
from tools.prepare import PrepareModel
from tools.progress import Progress, SilentProgress
from tools.release.bundle import collect_bundle
from tools.release.local import StageResult, stage_release
from tools.state import cache_dir
from tools.targets import LocalTarget, resolve_target

VERDICT_EXIT = {"PASS": EXIT_PASS, "FAIL": EXIT_BUDGET_FAIL, "INCONCLUSIVE": EXIT_INCONCLUSIVE}


@dataclass(frozen=True)
class DeployResult:
    report: dict
    report_dir: Path
    staged: StageResult
    pipeline: PipelineFile

    @property
    def exit_code(self) -> int:
        return VERDICT_EXIT[self.report["verdict"]]


def default_report_dir(pipeline: PipelineFile) -> Path:
    return Path("reports") / pipeline.spec.name


class Deploy:
    """Settings in the constructor; calling it does the work."""

    def __init__(
        self,
        pipeline_path: Path,
        target: str,
        *,
        frames: int | None = None,
        report_dir: Path | None = None,
        progress: Progress | None = None,
    ) -> None:
        self.pipeline_path = Path(pipeline_path)
        self.target_name = target
        self.frames = frames
        self.report_dir = report_dir
        self.progress = progress or SilentProgress()

    def __call__(self) -> DeployResult:
        target = resolve_target(self.target_name)
        pipeline = load_pipeline(self.pipeline_path)
        prepare = PrepareModel(pipeline, cache_dir())
        task = self.progress.task("preparing model" + (" (cached)" if prepare.cached else ""), total=None)
        artifacts = prepare()
        task.done()
        bundle = collect_bundle(pipeline, artifacts, prepare.key)
        store = ReleaseStore(target.root)
        staged = stage_release(store, bundle, self.progress)
        report_dir = (self.report_dir or default_report_dir(pipeline)).resolve()
        report = run_local(target, store, staged.release_id, report_dir, self.frames, self.progress)
        return DeployResult(report, report_dir, staged, pipeline)


def run_local(
    target: LocalTarget, store: ReleaseStore, release_id: str, report_dir: Path, frames: int | None, progress: Progress
) -> dict:
    """Run the release's own `sdk` in a child process, as the device would, and read its report."""
    release = store.release_dir(release_id)
    report_dir.mkdir(parents=True, exist_ok=True)
    for stale in (REPORT_FILE, "detections.jsonl"):
        (report_dir / stale).unlink(missing_ok=True)  # never mistake an old report for this run's
    command = [
        sys.executable,
        "-B",
        "-m",
        "sdk",
        "run",
        "--release",
        str(release),
        "--report-dir",
        str(report_dir),
        "--target",
        target.name,
        "--events",
    ]
    if frames is not None:
        command += ["--frames", str(frames)]
    # cwd = the release: `-m sdk` imports the release's runtime, not the host's checkout.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    child = subprocess.Popen(command, cwd=release, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    task = progress.task(f"running on {target.name}", total=frames)
    try:
        for line in child.stdout:
            event = _parse_event(line)
            if event.get("event") == "started":
                task.update(total=event.get("total"))
            elif event.get("event") in ("progress", "finished"):
                task.update(completed=event["frames"])
        stderr = child.stderr.read()
        code = child.wait()
    except KeyboardInterrupt:
        child.send_signal(signal.SIGTERM)  # the runtime stops cleanly and still writes its report
        child.wait()
        raise
    finally:
        task.done()
    report_path = report_dir / REPORT_FILE
    if code not in VERDICT_EXIT.values() or not report_path.is_file():
        message = _last_error(stderr) or f"the runtime exited with status {code}"
        raise SdkError(f"run on {target.name} failed: {message}", hint="the release stays current; see the message above")
    return json.loads(report_path.read_text())


def _parse_event(line: str) -> dict:
    try:
        event = json.loads(line)
    except ValueError:
        return {}
    return event if isinstance(event, dict) else {}


def _last_error(stderr: str) -> str:
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    for line in reversed(lines):
        if line.startswith("error:"):
            return line.removeprefix("error:").strip()
    return lines[-1] if lines else ""
