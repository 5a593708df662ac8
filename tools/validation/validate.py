"""`sdk validate PIPELINE --target T`: the latency and accuracy acceptance run on the target's current release.

Nothing is deployed unless asked (`deploy=True`, what the pytest plugin does): a validation
measures what is on the vehicle. The release must run this very pipeline file: before anything
runs or any file is written, the current release's manifest is read and its pipeline's sha256
compared with this file's; anything else is refused (naming the pipeline and release that are
current) rather than judged against the wrong budgets. With `repeat` >= 2 (or `budgets.determinism`
in the file) the run is repeated on the same replay and the outputs compared frame by frame.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from sdk.errors import TargetError
from sdk.release import MANIFEST, ReleaseManifest, sha256_of
from sdk.runtime.interference import InterferencePlan
from sdk.spec.loader import PipelineFile, load_pipeline
from tools.deploy import DeployResult, default_report_dir, engine_step, health_policy, install_release, int8_artifacts, measure
from tools.fleet import FleetResult
from tools.history.hook import finished
from tools.prepare import PrepareModel
from tools.progress import Progress, SilentProgress
from tools.release.bundle import collect_bundle
from tools.release.stage import StageResult
from tools.sessions import open_session, paused_service
from tools.state import cache_dir
from tools.targets import resolve_targets
from tools.validation.acceptance import accept
from tools.validation.report_dirs import check_report_dir, empty_report_dir, update_latest

ValidationResult = DeployResult  # the same facts: the judged report, where it is, the release it ran


def current_release(session) -> StageResult:
    """The release that is current on the target, as the deploy flow would describe it (nothing is sent)."""
    current = session.status().get("committed")  # the release that passed its health check (a trial is not validated)
    if current is None:
        raise TargetError(f"no release is current on {session.name}", hint=f"deploy one first: deploy --target {session.name} PIPELINE")
    return StageResult(current, 0, 0, 0, current, None, device=session.probe(), python=session.env(current))


class Validate:
    """Settings in the constructor; calling it runs the validation (and repeats) and returns the judged report.

    `report_dir`: None gives the run a folder of its own (reports/<pipeline>/<time>-<target>-validate/,
    and `latest` links to it); a named one must be empty, or `force` empties it once the checks passed."""

    def __init__(
        self,
        pipeline_path: Path,
        target: str,
        *,
        frames: int | None = None,
        report_dir: Path | None = None,
        repeat: int | None = None,
        stress: str | None = None,
        deploy: bool = False,
        progress: Progress | None = None,
        force: bool = False,
        parallel: int = 4,
        canary: bool = False,
    ) -> None:
        self.pipeline_path = Path(pipeline_path)
        self.target_name = target
        self.frames = frames
        self.report_dir = report_dir
        self.repeat = repeat
        self.stress = stress
        self.deploy = deploy
        self.progress = progress or SilentProgress()
        self.force = force
        self.parallel = parallel
        self.canary = canary

    def __call__(self) -> ValidationResult | FleetResult:
        targets = resolve_targets(self.target_name)
        if len(targets) > 1:  # a group: each target validated into DIR/<target>/, and the fleet report in DIR/fleet.json
            from tools.validation.validate_fleet import validate_fleet

            return validate_fleet(self, targets)
        if self.stress:
            InterferencePlan.parse(self.stress)  # refuse a bad --stress before anything runs
        pipeline = load_pipeline(self.pipeline_path)
        repeat = self.repeat or (2 if pipeline.spec.budgets.determinism is not None else 1)
        if self.report_dir is not None:
            report_dir = check_report_dir(self.report_dir, self.force)
        else:
            report_dir = default_report_dir(pipeline, self.target_name, "validate").resolve()
        repeats: list[Path] = []
        ((target,),) = (targets,)
        with open_session(target) as session:
            if not self.deploy:
                require_current(session, pipeline)  # before anything runs or is written
            prepare = PrepareModel(pipeline, cache_dir())
            task = self.progress.task("preparing model" + (" (cached)" if prepare.cached else ""), total=None)
            artifacts = prepare()
            task.done()
            with paused_service(session, self.progress):
                if self.deploy:
                    int8 = int8_artifacts(pipeline, artifacts, self.progress)
                    bundle = collect_bundle(pipeline, artifacts, prepare.key, int8)
                    step = engine_step(pipeline, artifacts, int8, target, self.progress)
                    policy = health_policy(pipeline, target)
                    staged = install_release(session, target, bundle, self.progress, int8, step, policy, if_damaged=pipeline.spec.service.if_damaged)
                else:
                    staged = current_release(session)
                if self.force:
                    empty_report_dir(report_dir)
                report = measure(session, staged, report_dir, self.frames, self.progress, stress=self.stress)
                _require_same_pipeline(report, pipeline, session.name)
                for run in range(2, repeat + 1):
                    folder = report_dir / f"repeat-{run}"
                    measure(session, staged, folder, self.frames, self.progress, stress=self.stress, run_name=f"validation-{run}")
                    repeats.append(folder)
        report = accept(report_dir, pipeline, artifacts, report, self.progress, repeats)
        if self.report_dir is None:
            update_latest(report_dir)
        finished(report_dir, "validate")  # into the history (and MLflow, where asked); never fails the validation
        return ValidationResult(report, report_dir, staged, pipeline)


def _release_file(session, release_id: str, name: str) -> bytes:
    """One file of a release on the target, read without running anything there."""
    store = getattr(session, "store", None)
    if store is not None:  # local: the store is on this machine
        return (store.release_dir(release_id) / name).read_bytes()
    with session.connection.sftp().open(f"{session.root}/releases/{release_id}/{name}", "rb") as handle:  # a vehicle: SFTP
        return handle.read()


def require_current(session, pipeline: PipelineFile) -> str:
    """Refuse (TargetError) unless the target's current release runs this very pipeline file, saying which
    pipeline and release are current. Reads the release's manifest: nothing runs, nothing is written."""
    from tools.release.bundle import runtime_files

    session.ensure_agent(runtime_files())
    current = session.status().get("committed")  # the release that passed its health check
    mine = sha256_of(pipeline.path)
    if current is None:
        raise TargetError(
            f"no release is current on {session.name}: there is nothing to validate {pipeline.path.name} against",
            hint=f"deploy one first: deploy --target {session.name} {pipeline.path}, or validate with --deploy",
        )
    try:
        manifest = ReleaseManifest.from_json(_release_file(session, current, MANIFEST).decode(), where=f"{session.name}: release {current}")
        entry = manifest.files[manifest.pipeline]
        name = (yaml.safe_load(_release_file(session, current, manifest.pipeline)) or {}).get("name")
    except (OSError, KeyError, ValueError, AttributeError, yaml.YAMLError) as exc:
        raise TargetError(
            f"cannot read the pipeline of release {current} on {session.name}: {exc}",
            hint=f"deploy again: deploy --target {session.name} {pipeline.path}",
        ) from None
    if entry.sha256 != mine:
        raise TargetError(
            f"the current release on {session.name} is {current}, which runs another version of {pipeline.path.name}: "
            f"pipeline {name!r} ({manifest.pipeline}, sha256 {entry.sha256[:12]}); this file is pipeline {pipeline.spec.name!r} "
            f"(sha256 {mine[:12]}). Its verdict would judge the wrong budgets; nothing was run and no report was written",
            hint=f"deploy this file first (deploy --target {session.name} {pipeline.path}), or validate with --deploy",
        )
    return current


def _require_same_pipeline(report: dict, pipeline: PipelineFile, target: str) -> None:
    """After the run, the same check on what really ran (the report's hash)."""
    ran = (report.get("hashes") or {}).get("pipeline_sha256")
    if ran != sha256_of(pipeline.path):
        raise TargetError(
            f"the current release on {target} ({report.get('release')}) runs another version of {pipeline.path.name} "
            f"(sha256 {str(ran)[:12]}, this file {sha256_of(pipeline.path)[:12]}): its verdict would judge the wrong budgets",
            hint=f"deploy this file first (deploy --target {target} {pipeline.path}), or validate with --deploy",
        )
