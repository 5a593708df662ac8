"""`deploy --target T PIPELINE`: validate, prepare, stage, activate on trial, health-check, run, report.

Nothing reaches a target before the pipeline file has validated and the model is prepared, so a
bad file leaves every target untouched. Activation is a trial (RAUC style): the new release must
start, load its model and process a few frames on the target before it is committed; if it does
not, the previous release comes back and the deploy fails with the runtime's own error.
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import dataclass, replace
from pathlib import Path

from sdk.errors import EXIT_BUDGET_FAIL, EXIT_INCONCLUSIVE, EXIT_PASS, ReleaseError, SdkError
from sdk.release import pipeline_name_of
from sdk.runtime.junit import JUNIT_FILE
from sdk.runtime.report import REPORT_FILE, write_report
from sdk.runtime.timeline import TIMELINE_FILE
from sdk.spec.loader import PipelineFile, load_pipeline
from sdk.store.trial import HealthPolicy
from tools.connect.sessions import open_session, paused_service, take_lease
from tools.deploy.fleet import FleetResult, deploy_fleet
from tools.engines.for_deploy import engine_for_device, wants_engine
from tools.evaluate.labelled_run import checked_labels
from tools.evidence.acceptance import accept
from tools.evidence.html_report import HTML_FILE
from tools.evidence.provenance import with_host_run
from tools.evidence.reference import REFERENCE_FILE
from tools.history.hook import finished
from tools.int8.for_deploy import Int8Choice, Int8ForDeploy, trt_cache_file
from tools.models.prepare import PrepareModel
from tools.progress import Progress, SilentProgress
from tools.release.bundle import Bundle, collect_bundle, runtime_files, with_engine, with_int8, with_wheels
from tools.release.bytecode import bytecode_files
from tools.release.kernels import build_kernels, kernel_files, parse_compute_capability, with_kernels
from tools.release.signing import binding_for, signer_for
from tools.release.stage import StageResult, manifest_for, stage_release
from tools.release.wheels import download_wheels, plan_wheels
from tools.reports.report_dirs import default_report_dir
from tools.state import cache_dir, shared_cache_dir
from tools.targets import RemoteTarget, Target, resolve_targets

VERDICT_EXIT = {"PASS": EXIT_PASS, "FAIL": EXIT_BUDGET_FAIL, "INCONCLUSIVE": EXIT_INCONCLUSIVE}
DEVICE_FILE = "device.json"  # the target's fingerprint, probed by this deploy
VOLATILE_FACTS = ("free_disk_bytes",)  # probed, but not what the device is: kept out of device.json and its hash
RUN_FILES = (REPORT_FILE, "detections.jsonl", TIMELINE_FILE, JUNIT_FILE, HTML_FILE, REFERENCE_FILE)
LEGACY_PLOTS = ("latency_timeline.png", "stage_cdf.png", "latency_histogram.png", "miss_streaks.png")  # before plots were inline


@dataclass(frozen=True)
class DeployResult:
    report: dict
    report_dir: Path
    staged: StageResult
    pipeline: PipelineFile

    @property
    def exit_code(self) -> int:
        return VERDICT_EXIT[self.report["verdict"]]


def deploy_owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


class TargetRun:
    """What a command that runs a pipeline file on a target, or on a fleet, is given (`Deploy`, `Validate`)."""

    def __init__(
        self,
        pipeline_path: Path,
        target: str,
        *,
        frames: int | None = None,
        report_dir: Path | None = None,
        progress: Progress | None = None,
        parallel: int = 4,
        canary: bool = False,
    ) -> None:
        self.pipeline_path = Path(pipeline_path)
        self.target_name = target
        self.frames = frames
        self.report_dir = report_dir
        self.progress = progress or SilentProgress()
        self.parallel = parallel
        self.canary = canary


class Deploy(TargetRun):
    """Settings in the constructor (TargetRun's, the key that signs the release, the live view's port); calling it does the work."""

    def __init__(self, pipeline_path: Path, target: str, *, sign_key: Path | None = None, live_view: int | None = None, **settings) -> None:
        super().__init__(pipeline_path, target, **settings)
        self.sign_key = sign_key
        self.live_view = live_view  # --live-view PORT: the measured run serves the live view there (else it serves none)

    def __call__(self) -> DeployResult | FleetResult:
        """One target: its result (errors raise). Several (`a,b` or a group): a FleetResult naming each failure."""
        targets = resolve_targets(self.target_name)
        pipeline = load_pipeline(self.pipeline_path)
        checked_labels(pipeline)  # evaluation.labels: the labels and the class map, before anything is sent
        prepare = PrepareModel(pipeline, cache_dir())
        task = self.progress.task("preparing model" + (" (cached)" if prepare.cached else ""), total=None)
        artifacts = prepare()
        task.done()
        int8 = int8_artifacts(pipeline, artifacts, self.progress)
        base = collect_bundle(pipeline, artifacts, prepare.key, int8, live_view=self.live_view)
        report_dir = (self.report_dir or default_report_dir(pipeline, self.target_name)).resolve()
        if len(targets) > 1:
            return deploy_fleet(
                targets,
                lambda session, target: install_release(
                    session,
                    target,
                    base,
                    self.progress,
                    int8,
                    engine_step(pipeline, artifacts, int8, target, self.progress),
                    health_policy(pipeline, target),
                    self.sign_key,
                    pipeline.spec.service.if_damaged,
                ),
                lambda session, staged, folder: accept(
                    folder, pipeline, artifacts, measure(session, staged, folder, self.frames, self.progress, live_view=self.live_view), self.progress
                ),
                self.frames,
                report_dir,
                self.progress,
                parallel=self.parallel,
                canary=self.canary,
            )
        (target,) = targets
        with open_session(target) as session, paused_service(session, self.progress, deploy_owner()):
            engine = engine_step(pipeline, artifacts, int8, target, self.progress)
            policy = health_policy(pipeline, target)
            staged = install_release(session, target, base, self.progress, int8, engine, policy, self.sign_key, pipeline.spec.service.if_damaged)
            report = measure(session, staged, report_dir, self.frames, self.progress, live_view=self.live_view)
        report = accept(report_dir, pipeline, artifacts, report, self.progress)
        finished(report_dir, "deploy")  # into the history (and MLflow, where asked); never fails the deploy
        return DeployResult(report, report_dir, staged, pipeline)


def int8_artifacts(pipeline: PipelineFile, artifacts, progress: Progress) -> Int8Choice | None:
    """For `model.precision: int8`: calibrated (or cached) INT8 artifacts that passed the accuracy gate."""
    if pipeline.spec.model.precision != "int8":
        return None
    from tools.evaluate.gate import LabelGate

    return Int8ForDeploy(pipeline, artifacts, cache_dir(), progress, label_gate=LabelGate.of)()


def engine_step(pipeline: PipelineFile, artifacts, int8: Int8Choice | None, target, progress: Progress):
    """facts -> the TensorRT engine for that device (built on it, or cached), or None where the pipeline runs without one."""

    def engine(facts: dict):
        if not wants_engine(pipeline, target, facts):
            return None
        return engine_for_device(pipeline, artifacts, int8, target, facts, cache_dir(), progress)

    return engine


def bundle_for_device(session, base: Bundle, progress: Progress, int8: Int8Choice | None = None, engine=None) -> tuple[Bundle, dict]:
    """Probe the device once; add the calibration cache for its TensorRT, the CUDA kernels for its GPU, and
    wheels of whatever runtime modules its Python lacks."""
    task = progress.task(f"probing {session.name}", total=None)
    facts = session.probe()
    task.done()
    return bundle_for_facts(base, facts, progress, int8, engine), facts


def bundle_for_facts(base: Bundle, facts: dict, progress: Progress, int8: Int8Choice | None = None, engine=None) -> Bundle:
    """The bundle for a device described by `facts` (a probe's, or what `sdk export` assumes of a target file)."""
    bytecode = bytecode_files(base.files, facts.get("python_abi"), shared_cache_dir())
    if bytecode:  # the device's Python is the host's
        base = replace(base, files={**base.files, **bytecode})
    if int8 is not None and facts.get("tensorrt"):
        base = with_int8(base, int8.qdq_model, int8.ranges, trt_cache_file(int8.calibration, facts["tensorrt"], int8.dla), int8.precision_file)
    built = None
    if engine is not None:  # engine(facts) -> the TensorRT engine this device gets, or None
        built = engine(facts)
        if built is not None:
            base = with_engine(base, built)
    compute_capability = parse_compute_capability(facts.get("compute_capability"))
    if compute_capability is not None:
        task = progress.task(f"CUDA kernels for compute capability {compute_capability[0]}.{compute_capability[1]}", total=None)
        base = with_kernels(base, kernel_files(build_kernels(cache_dir()), compute_capability))
        task.done()
    # What the device lacks, resolved against what it has and keeps (its numpy, OpenCV, cuda-python); cuda-bindings
    # pinned to the driver's major; scipy only for a pipeline that tracks; no ONNX Runtime where the release runs on
    # TensorRT (an engine and a CUDA driver).
    on_tensorrt = built is not None and bool(facts.get("cuda"))
    plan = plan_wheels(facts, onnxruntime=not on_tensorrt, needs=base.modules)
    if not plan.requirements:
        return base
    against = f" (against the device's {', '.join(plan.constraints)})" if plan.constraints else ""
    task = progress.task(f"fetching wheels for {facts['arch']} {facts['python_abi']}: {', '.join(plan.requirements)}{against}", total=None)
    wheels = download_wheels(plan.requirements, facts["arch"], facts["python_abi"], cache_dir(), plan.constraints, plan.keep)
    task.done()
    return with_wheels(base, wheels)


def sign_key_of(target: Target) -> Path | None:
    """The target file's `sign_key` (relative to the target file), or None: its releases go unsigned."""
    if isinstance(target, RemoteTarget) and target.spec.sign_key:
        return target.host_path(target.spec.sign_key)
    return None


def health_policy(pipeline: PipelineFile, target: Target) -> HealthPolicy:
    """The pipeline's `health:` block; a target file's `health_frames` can only raise the minimum."""
    health = pipeline.spec.health
    floor = target.spec.health_frames if isinstance(target, RemoteTarget) else 1
    return HealthPolicy(min_frames=max(health.min_frames, floor), timeout_s=health.timeout_s)


def install_release(
    session,
    target: Target,
    base: Bundle,
    progress: Progress,
    int8: Int8Choice | None = None,
    engine=None,
    policy: HealthPolicy | None = None,
    sign_key: Path | None = None,
    if_damaged: str | None = None,
) -> StageResult:
    """Probe, stage, build the offline environment, then the device-owned trial and the commit, under the deploy lease.

    The device switches to the release, runs its health check under its own deadline and rolls back
    by itself on anything but a pass; the host commits a pass with its fencing token. A host that dies
    or loses its lease at any point leaves the last committed release in place."""
    policy = policy or HealthPolicy()
    key = sign_key or sign_key_of(target)
    binding = binding_for(target, pipeline_name_of(base.files[base.pipeline].read_text()) or "unnamed") if key else None
    sign = signer_for(key, binding)  # a bad key is refused before anything is sent
    session.ensure_agent(runtime_files())
    owner = deploy_owner()
    held = session.token is not None  # the caller holds the lease already (paused_service): through the measured run
    if not held:
        take_lease(session, owner, progress)  # over SSH the agent holds it: one device start-up for the whole deploy (decision 0810)
    try:
        bundle, facts = bundle_for_device(session, base, progress, int8, engine)
        manifest = manifest_for(bundle)
        staged = stage_release(session, bundle, manifest, progress, sign(manifest))
        staged = replace(staged, device=facts, python=session.env(staged.release_id))
        if staged.previous != staged.release_id:
            task = progress.task(f"health check on {session.name}", total=policy.min_frames)
            try:
                outcome = session.trial(staged.release_id, owner, policy, _progress_events(task))
            finally:
                task.done()
            if not outcome.healthy:
                raise trial_failed(staged.release_id, session.name, outcome, policy)
            session.store_op("commit", *(["--if-damaged", if_damaged] if if_damaged else []))
            session.store_op("prune")
            # The service's systemd unit follows the release it runs (linking it into systemd is the user's root step).
            staged = replace(staged, service_unit=session.service_op("unit", python=staged.python))
    finally:
        if not held:
            session.unlock(owner)
    return staged


def trial_failed(release: str, where: str, outcome, policy: HealthPolicy) -> ReleaseError:
    """A failed trial, said as the device is: rolled back, or (the store's mutex held by another process) rolled back by
    its next start or deploy, with `current` naming the trial until then."""
    now = "the last committed release is current again"
    if outcome.still_on_trial(release):
        now = f"until then `current` names the trial; sdk status --target {where} shows when the device is back on {outcome.committed}"
    hint = f"{now}; fix the cause and deploy again"
    if outcome.frames < policy.min_frames and "health.min_frames" in outcome.reason:  # the source ran out
        hint = (
            f"a single image or a short recording ends before the health check's {policy.min_frames} frames: "
            f"set source.replay.loop: true (or more replay.frames), or lower health.min_frames; {now}"
        )
    return ReleaseError(f"release {release} failed its health check on {where}: {outcome.reason}; {outcome.rolled_back_text(release)}", hint=hint)


def measure(
    session,
    staged: StageResult,
    report_dir: Path,
    frames: int | None,
    progress: Progress,
    *,
    stress: str | None = None,
    run_name: str = "validation",
    live_view: int | None = None,
    evaluate: str | None = None,
) -> dict:
    """The validation run on the target; its report and outputs land in `report_dir`, with the device's fingerprint.
    `live_view`: a port the run serves the Foxglove live view on (none otherwise, whatever the pipeline's sinks say);
    `evaluate`: a folder of images on the device, for an evaluation run on them (sdk.runtime.evaluation_run)."""
    report_dir.mkdir(parents=True, exist_ok=True)
    for stale in (*RUN_FILES, DEVICE_FILE, *LEGACY_PLOTS):
        (report_dir / stale).unlink(missing_ok=True)  # never mistake an old report for this run's
    viewed = f", live view on port {live_view}" if live_view is not None else ""
    task = progress.task(f"running on {session.name}" + (f" under stress {stress}" if stress else "") + viewed, total=frames)
    try:
        asked = {"live_view": live_view} if live_view is not None else {}
        asked |= {"evaluate": evaluate} if evaluate is not None else {}
        outcome = session.run(staged.release_id, run_name, frames, _progress_events(task), staged.python, stress, **asked)
    finally:
        task.done()
    if not outcome.ran:
        raise SdkError(f"run on {session.name} failed: {outcome.error()}", hint="the release stays current; see the message above")
    session.fetch_run(run_name, report_dir)
    device = {k: v for k, v in staged.device.items() if k not in VOLATILE_FACTS}  # what the device is, the same every run
    fingerprint = (json.dumps({"target": session.name, **device}, indent=2, sort_keys=True) + "\n").encode()
    (report_dir / DEVICE_FILE).write_bytes(fingerprint)
    report = json.loads((report_dir / REPORT_FILE).read_text())
    volatile = {k: staged.device[k] for k in VOLATILE_FACTS if k in staged.device}
    if volatile:  # what changes from run to run (free disk) goes with this run's environment, not the fingerprint
        report.setdefault("environment", {})["device_at_deploy"] = volatile
    # Traceability: who ran it from where, and the hash of device.json (the fingerprint this deploy probed).
    report["run"] = with_host_run(report.get("run"), target=session.name, fingerprint=fingerprint if staged.device else None)
    write_report(report, report_dir)
    return report


def _progress_events(task):
    def on_event(event: dict) -> None:
        if event.get("event") == "started" and event.get("total"):
            task.update(total=event["total"])
        elif event.get("event") in ("progress", "finished"):
            task.update(completed=event["frames"])

    return on_event
