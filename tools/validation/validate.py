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

from sdk.runtime.interference import InterferencePlan
from sdk.spec.loader import load_pipeline
from tools.connect.sessions import open_session, paused_service
from tools.deploy.fleet import FleetResult
from tools.deploy.flow import DeployResult, TargetRun, engine_step, health_policy, install_release, int8_artifacts, measure
from tools.evaluate.labelled_run import checked_labels
from tools.evidence.acceptance import accept
from tools.history.hook import finished
from tools.models.prepare import PrepareModel
from tools.release.bundle import collect_bundle
from tools.release.current import current_release, require_current, require_same_pipeline
from tools.reports.report_dirs import check_report_dir, default_report_dir, empty_report_dir, update_latest
from tools.state import cache_dir
from tools.targets import resolve_targets

ValidationResult = DeployResult  # the same facts: the judged report, where it is, the release it ran


class Validate(TargetRun):
    """Settings in the constructor (TargetRun's, and how to repeat, stress, deploy first, empty a named folder);
    calling it runs the validation (and repeats) and returns the judged report.

    `report_dir`: None gives the run a folder of its own (reports/<pipeline>/<time>-<target>-validate/,
    and `latest` links to it); a named one must be empty, or `force` empties it once the checks passed."""

    def __init__(
        self,
        pipeline_path: Path,
        target: str,
        *,
        repeat: int | None = None,
        stress: str | None = None,
        deploy: bool = False,
        force: bool = False,
        **settings,
    ) -> None:
        super().__init__(pipeline_path, target, **settings)
        self.repeat, self.stress, self.deploy, self.force = repeat, stress, deploy, force

    def __call__(self) -> ValidationResult | FleetResult:
        targets = resolve_targets(self.target_name)
        if len(targets) > 1:  # a group: each target validated into DIR/<target>/, and the fleet report in DIR/fleet.json
            from tools.validation.validate_fleet import validate_fleet

            return validate_fleet(self, targets)
        if self.stress:
            InterferencePlan.parse(self.stress)  # refuse a bad --stress before anything runs
        pipeline = load_pipeline(self.pipeline_path)
        checked_labels(pipeline)  # evaluation.labels: the labels and the class map, before anything runs
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
                require_same_pipeline(report, pipeline, session.name)
                for run in range(2, repeat + 1):
                    folder = report_dir / f"repeat-{run}"
                    measure(session, staged, folder, self.frames, self.progress, stress=self.stress, run_name=f"validation-{run}")
                    repeats.append(folder)
        report = accept(report_dir, pipeline, artifacts, report, self.progress, repeats)
        if self.report_dir is None:
            update_latest(report_dir)
        finished(report_dir, "validate")  # into the history (and MLflow, where asked); never fails the validation
        for folder in repeats:  # each repeat is a run of its own: `sdk compare` and the regression gate use it as a replicate
            finished(folder, "validate")
        return ValidationResult(report, report_dir, staged, pipeline)
