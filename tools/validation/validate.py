"""`sdk validate PIPELINE --target T`: the latency and accuracy acceptance run on the target's current release.

Nothing is deployed unless asked (`deploy=True`, what the pytest plugin does): a validation
measures what is on the vehicle. The release must run this very pipeline file (its hash is in
the report); anything else is refused rather than judged against the wrong budgets. With
`repeat` >= 2 (or `budgets.determinism` in the file) the run is repeated on the same replay and
the outputs compared frame by frame.
"""

from __future__ import annotations

from pathlib import Path

from sdk.errors import ConfigError, TargetError
from sdk.release import sha256_of
from sdk.runtime.interference import InterferencePlan
from sdk.spec.loader import PipelineFile, load_pipeline
from tools.deploy import DeployResult, default_report_dir, engine_step, install_release, int8_artifacts, measure
from tools.prepare import PrepareModel
from tools.progress import Progress, SilentProgress
from tools.release.bundle import collect_bundle
from tools.release.stage import StageResult
from tools.sessions import open_session, paused_service
from tools.state import cache_dir
from tools.targets import resolve_targets
from tools.validation.acceptance import accept

ValidationResult = DeployResult  # the same facts: the judged report, where it is, the release it ran


def current_release(session) -> StageResult:
    """The release that is current on the target, as the deploy flow would describe it (nothing is sent)."""
    current = session.status().get("current")
    if current is None:
        raise TargetError(f"no release is current on {session.name}", hint=f"deploy one first: deploy --target {session.name} PIPELINE")
    return StageResult(current, 0, 0, 0, current, None, device=session.probe(), python=session.env(current))


class Validate:
    """Settings in the constructor; calling it runs the validation (and repeats) and returns the judged report."""

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
    ) -> None:
        self.pipeline_path = Path(pipeline_path)
        self.target_name = target
        self.frames = frames
        self.report_dir = report_dir
        self.repeat = repeat
        self.stress = stress
        self.deploy = deploy
        self.progress = progress or SilentProgress()

    def __call__(self) -> ValidationResult:
        targets = resolve_targets(self.target_name)
        if len(targets) != 1:
            raise ConfigError(
                f"--target {self.target_name!r} names {len(targets)} targets", hint="validate one target at a time (deploy handles fleets)"
            )
        if self.stress:
            InterferencePlan.parse(self.stress)  # refuse a bad --stress before anything runs
        pipeline = load_pipeline(self.pipeline_path)
        repeat = self.repeat or (2 if pipeline.spec.budgets.determinism is not None else 1)
        prepare = PrepareModel(pipeline, cache_dir())
        task = self.progress.task("preparing model" + (" (cached)" if prepare.cached else ""), total=None)
        artifacts = prepare()
        task.done()
        report_dir = (self.report_dir or default_report_dir(pipeline)).resolve()
        repeats: list[Path] = []
        ((target,),) = (targets,)
        with open_session(target) as session, paused_service(session, self.progress):
            if self.deploy:
                int8 = int8_artifacts(pipeline, artifacts, self.progress)
                bundle = collect_bundle(pipeline, artifacts, prepare.key, int8)
                staged = install_release(session, target, bundle, self.progress, int8, engine_step(pipeline, artifacts, int8, target, self.progress))
            else:
                staged = current_release(session)
            report = measure(session, staged, report_dir, self.frames, self.progress, stress=self.stress)
            _require_same_pipeline(report, pipeline, session.name)
            for run in range(2, repeat + 1):
                folder = report_dir / f"repeat-{run}"
                measure(session, staged, folder, self.frames, self.progress, stress=self.stress, run_name=f"validation-{run}")
                repeats.append(folder)
        report = accept(report_dir, pipeline, artifacts, report, self.progress, repeats)
        return ValidationResult(report, report_dir, staged, pipeline)


def _require_same_pipeline(report: dict, pipeline: PipelineFile, target: str) -> None:
    ran = (report.get("hashes") or {}).get("pipeline_sha256")
    if ran != sha256_of(pipeline.path):
        raise TargetError(
            f"the current release on {target} ({report.get('release')}) runs another version of {pipeline.path.name} "
            f"(sha256 {str(ran)[:12]}, this file {sha256_of(pipeline.path)[:12]}): its verdict would judge the wrong budgets",
            hint=f"deploy this file first (deploy --target {target} {pipeline.path}), or validate with --deploy",
        )
