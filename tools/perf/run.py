"""`sdk profile PIPELINE --target T` and `sdk predict PIPELINE --platform P`: the host side.

Profile: the model runs on the target's backend in a run of its own (`python -m sdk profile` there), under the
target's deploy lease with its service paused (tools/connect/sessions.py: paused_service), and the raw per-node times come
back. On `local` it profiles the pipeline's prepared model (no release needed); on a vehicle, the current release,
which must run this very pipeline file (as `sdk validate` requires). The host maps the nodes onto the prepared model's
layers, predicts the same layers (`--platform host` on this machine, scaled by the machine's speed during the
profile as reference probes between the frames measured it, tools/perf/host_speed.py; the target's platform on a
device running TensorRT) and writes the report. A profile never feeds a verdict.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from sdk.errors import ConfigError, TargetError
from sdk.profiling import OPTIMIZED_FILE, RAW_FILE
from tools.perf.layers import load_layers
from tools.perf.targets import device_prediction, host_prediction
from tools.progress import Progress, SilentProgress

DEFAULT_FRAMES = 50
RUN_NAME = "profile"
REFERENCE_DIR = "reference"


@dataclass(frozen=True)
class ProfileResult:
    report: dict
    report_dir: Path


def prepared(pipeline_path: Path, progress: Progress):
    from sdk.spec import load_pipeline
    from tools.models.prepare import PrepareModel
    from tools.state import cache_dir

    pipeline = load_pipeline(pipeline_path)
    prepare = PrepareModel(pipeline, cache_dir())
    task = progress.task("preparing model" + (" (cached)" if prepare.cached else ""), total=None)
    artifacts = prepare()
    task.done()
    return pipeline, artifacts


class Profile:
    """Settings in the constructor; calling it profiles, predicts and writes the report."""

    def __init__(self, pipeline_path: Path, target: str, *, frames: int | None = None, json_path: Path | None = None,
                 report_dir: Path | None = None, progress: Progress | None = None) -> None:  # fmt: skip
        self.pipeline_path = Path(pipeline_path)
        self.target_name = target
        self.frames = frames or DEFAULT_FRAMES
        self.json_path = json_path
        self.report_dir = report_dir
        self.progress = progress or SilentProgress()

    def __call__(self) -> ProfileResult:
        from tools.connect.sessions import open_session, paused_service
        from tools.perf.assemble import assemble
        from tools.perf.report import REPORT_FILE, write_html, write_json
        from tools.reports.report_dirs import default_report_dir
        from tools.targets import LocalTarget, resolve_targets

        targets = resolve_targets(self.target_name)
        if len(targets) != 1:
            raise ConfigError(f"--target {self.target_name!r} names {len(targets)} targets", hint="profile one target at a time")
        (target,) = targets
        from tools.output_paths import check_output_file, check_output_folder, pipeline_reads
        from tools.reports.report_dirs import mark_finished, mark_unfinished

        reads = pipeline_reads(self.pipeline_path)  # every output checked before the profile: never after minutes of work
        if self.json_path is not None:
            check_output_file(self.json_path, "--json", reads)
        if self.report_dir is not None:
            check_output_folder(self.report_dir, "--report-dir", reads)
        pipeline, artifacts = prepared(self.pipeline_path, self.progress)
        report_dir = (self.report_dir or default_report_dir(pipeline, self.target_name, "profile")).resolve()
        if self.report_dir is None:
            check_output_folder(report_dir, "the report folder", reads)
        report_dir.mkdir(parents=True, exist_ok=True)
        mark_unfinished(report_dir, "profile")
        raw_dir = report_dir / "raw"
        started = time.time()
        with open_session(target) as session:
            if isinstance(target, LocalTarget):
                with paused_service(session, self.progress):
                    self._run_local(pipeline, artifacts, raw_dir)
                facts = {"platform": "host"}
            else:
                from tools.release.current import require_current

                current = require_current(session, pipeline)
                with paused_service(session, self.progress):
                    self._run_remote(session, current, raw_dir)
                facts = {"platform": target.spec.platform, **session.probe()}
        report = assemble(pipeline, artifacts, raw_dir, target.name, facts, time.time() - started)
        write_json(report, report_dir / REPORT_FILE)
        write_html(report, report_dir)
        if self.json_path is not None:
            write_json(report, self.json_path, "--json")
        mark_finished(report_dir)
        from tools.history.hook import finished

        finished(report_dir, "profile")  # into the history (and MLflow, where asked); never fails the profile
        return ProfileResult(report, report_dir)

    def _run_local(self, pipeline, artifacts, raw_dir: Path) -> None:
        from tools.perf.host_speed import write_reference

        task = self.progress.task(f"profiling {self.frames} frames on this machine", total=None)
        reference = write_reference(raw_dir / REFERENCE_DIR)  # the probes that measure this machine's speed between the frames
        command = [sys.executable, "-B", "-m", "sdk", "profile", "--pipeline", str(pipeline.path), "--artifacts", str(artifacts.folder),
                   "--out", str(raw_dir), "--frames", str(self.frames), "--reference", str(reference)]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, timeout=3600, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
        task.done()
        if done.returncode != 0:
            raise TargetError(
                f"local: the profile failed: {done.stderr.strip()[-400:]}", hint="run the pipeline first: deploy --target local PIPELINE"
            )

    def _run_remote(self, session, release: str, raw_dir: Path) -> None:
        task = self.progress.task(f"profiling {self.frames} frames on {session.name}", total=None)
        run_dir = f"{session.root}/runs/{RUN_NAME}"
        session.clear_run(RUN_NAME)
        done = session.release_command(release, ["profile", "--release", ".", "--out", run_dir, "--frames", str(self.frames)], session.env(release))
        task.done()
        if done.returncode != 0:
            raise TargetError(f"{session.name}: the profile failed: {done.stderr.strip()[-400:]}", hint="see the release's Python environment")
        session.fetch_run(RUN_NAME, raw_dir)


def predict_pipeline(source: Path, platform: str, precision: str | None, dla: bool, tensorrt: str | None = None,
                     power_mode: str | None = None, batch: int | None = None) -> dict:  # fmt: skip
    """`sdk predict`: the whole model's and each layer's predicted time, no device needed. `source` is a pipeline
    (its prepared model) or a bare ONNX file (its batch dimension set to `batch`, 1 unless given)."""
    from tools.perf.assemble import prediction_report
    from tools.perf.bare_model import bare_layers, is_onnx

    if is_onnx(source):
        pipeline, model = None, bare_layers(Path(source), batch)
    else:
        if batch is not None:
            raise ConfigError(f"--batch {batch}: {source} is a pipeline, whose batch is its own (batch.size in the pipeline)",
                              hint="give the ONNX file itself to predict another batch: sdk predict MODEL.onnx --batch N")  # fmt: skip
        pipeline, artifacts = prepared(source, SilentProgress())
        model = load_layers(artifacts.model_path)
    if platform == "host":
        if dla:
            raise ConfigError("--dla needs a platform with DLA cores, not host", hint="e.g. --platform jetson-agx-orin --dla")
        if pipeline is None:
            from tools.perf.host_peaks import host_peaks
            from tools.perf.predict import predict_host
            from tools.state import shared_cache_dir

            peaks = host_peaks(None, False, shared_cache_dir())
            return prediction_report(None, model, predict_host(model, peaks), host=peaks)
        prediction, peaks = host_prediction(model, pipeline)
        return prediction_report(pipeline, model, prediction, host=peaks)
    from tools.perf.targets import power_comparison

    wanted = pipeline.spec.model.precision if pipeline is not None else "fp16"
    chosen = precision or {"int8": "int8", "fp16": "fp16"}.get(wanted, "fp16")
    prediction, target, placement = device_prediction(model, pipeline, platform, chosen, dla, tensorrt, power_mode)
    core = pipeline.spec.model.dla.core if dla and pipeline is not None and pipeline.spec.model.dla is not None else 0
    power = power_comparison(model, target, chosen, placement, core, power_mode is not None)
    report = prediction_report(pipeline, model, prediction, machine=target, placement=placement, power=power)
    from tools.perf.predict import predict_device

    without = predict_device(model, target, chosen, placement, dla_core=core, documented=False).total_ms
    report["total"]["without_trt_fusions_ms"] = round(without, 4)  # what TensorRT's documented fusions are worth here
    return report


__all__ = ["OPTIMIZED_FILE", "RAW_FILE", "Profile", "ProfileResult", "predict_pipeline"]
