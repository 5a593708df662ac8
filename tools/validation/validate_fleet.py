"""`sdk validate PIPELINE --target GROUP`: the validation on every target of a group (or comma list), as a fleet.

Each target's current release is measured into `DIR/<target>/` (with `--deploy`, deployed first), in a pool of
`parallel` at once, by the fleet deploy's own machinery (tools/deploy/fleet.py): one result per target, `DIR/fleet.json`
with the fleet report (per-device verdicts, the spread of each figure per device class, outliers), and the fleet's
worst verdict as the exit code. A target whose current release is not this pipeline file is that target's error.
"""

from __future__ import annotations

from sdk.runtime.interference import InterferencePlan
from sdk.spec.loader import load_pipeline
from tools.deploy.fleet import FleetResult, deploy_fleet
from tools.deploy.flow import engine_step, health_policy, install_release, int8_artifacts, measure
from tools.evaluate.labelled_run import checked_labels
from tools.evidence.acceptance import accept
from tools.models.prepare import PrepareModel
from tools.release.bundle import collect_bundle
from tools.release.current import current_release, require_current, require_same_pipeline
from tools.reports.report_dirs import check_report_dir, default_report_dir, empty_report_dir, update_latest
from tools.state import cache_dir


def validate_fleet(validate, targets) -> FleetResult:
    """`validate`: the Validate whose settings apply to every target."""
    if validate.stress:
        InterferencePlan.parse(validate.stress)
    pipeline = load_pipeline(validate.pipeline_path)
    checked_labels(pipeline)  # evaluation.labels: the labels and the class map, before anything runs
    repeat = validate.repeat or (2 if pipeline.spec.budgets.determinism is not None else 1)
    if validate.report_dir is not None:
        report_dir = check_report_dir(validate.report_dir, validate.force)
        if validate.force:
            empty_report_dir(report_dir)
    else:
        report_dir = default_report_dir(pipeline, validate.target_name, "validate").resolve()
    prepare = PrepareModel(pipeline, cache_dir())
    task = validate.progress.task("preparing model" + (" (cached)" if prepare.cached else ""), total=None)
    artifacts = prepare()
    task.done()
    progress = validate.progress
    if validate.deploy:
        int8 = int8_artifacts(pipeline, artifacts, progress)
        bundle = collect_bundle(pipeline, artifacts, prepare.key, int8)

    def install(session, target):
        if validate.deploy:
            step = engine_step(pipeline, artifacts, int8, target, progress)
            return install_release(
                session, target, bundle, progress, int8, step, health_policy(pipeline, target), if_damaged=pipeline.spec.service.if_damaged
            )
        require_current(session, pipeline)
        return current_release(session)

    def run(session, staged, folder):
        report = measure(session, staged, folder, validate.frames, progress, stress=validate.stress)
        require_same_pipeline(report, pipeline, session.name)
        repeats = []
        for number in range(2, repeat + 1):
            repeats.append(folder / f"repeat-{number}")
            measure(session, staged, repeats[-1], validate.frames, progress, stress=validate.stress, run_name=f"validation-{number}")
        return accept(folder, pipeline, artifacts, report, progress, repeats)

    result = deploy_fleet(
        targets, install, run, validate.frames, report_dir, progress, parallel=validate.parallel, canary=validate.canary, kind="validate"
    )
    if validate.report_dir is None:
        update_latest(report_dir)
    return result
