"""`sdk evaluate`: the pipeline's model on labelled images, scored by COCO's evaluator, judged on the label budgets.

In order, nothing run before everything is checked: the pipeline file; the labels (COCO JSON or a YOLO dataset); the
class map (every model class finds a category, or is left out by name); the model, prepared as a deploy prepares it.
Then the images run through the deploy's stages (tools/evaluate/detect.py), pycocotools scores the detections
(tools/evaluate/metrics.py) and the budgets on labels are judged (tools/evaluate/judge.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from sdk.errors import ConfigError
from sdk.runtime.verdict import combine, describe_verdict
from sdk.spec.loader import PipelineFile
from tools.evaluate.classmap import ClassMap, map_classes
from tools.evaluate.labels import LabelSet, load_labels
from tools.evaluate.labelset import IMAGES_FLAG
from tools.evaluate.target_shards import OnTargets, resolve_fleet
from tools.history.label_matches import MATCHES_FILE, LabelMatches, from_evaluation
from tools.history.stats import DRAWS
from tools.progress import Progress, SilentProgress

LOCAL = "local"


@dataclass(frozen=True)
class Request:
    pipeline: Path
    labels: Path
    images: Path | None = None
    target: str = "local"
    draws: int = DRAWS
    shards: int = 1  # parts of the labelled set detected at once (tools/evaluate/shards.py)
    ray: str | None = None  # run the shards as Ray tasks: "local" (a Ray on this machine) or a cluster's address
    partial: bool = False  # a fleet's target failed: score the images the others ran (tools/validation/evaluate_targets.py)


def checked_inputs(pipeline: PipelineFile, labels_path: Path, images: Path | None, images_from: str = IMAGES_FLAG) -> tuple[LabelSet, ClassMap]:
    """The labels and the class map, or the first problem as an error (before any model runs); `images_from`: where
    errors say the images were given."""
    labels = load_labels(labels_path, images, images_from)
    classes = pipeline.class_names()
    mapping = map_classes(tuple(classes), labels.categories, dict(pipeline.spec.evaluation.classes), str(pipeline.path))
    if not mapping.to_category:
        raise ConfigError(f"{pipeline.path}: no class of the model maps to a category of {labels.source}", hint="map them: evaluation.classes")
    budgets = pipeline.spec.budgets.accuracy
    for name in budgets.min_recall_at_precision if budgets is not None else {}:
        if name in mapping.left_out:
            raise ConfigError(
                f"{pipeline.path}: budgets.accuracy.min_recall_at_precision.{name}: class {name!r} is left out of the scores "
                "(evaluation.classes maps it to null); allowed: a class that maps to a category of the labels",
                hint=f"map {name!r} to its category in evaluation.classes, or drop its budget",
            )
    return labels, mapping


def evaluate(request: Request, progress: Progress | None = None, on_targets: OnTargets | None = None) -> dict:
    """The evaluation as report.json holds it (see tools/evaluate/report.py for the files)."""
    return evaluate_run(request, progress, on_targets)[0]


def evaluate_run(request: Request, progress: Progress | None = None, on_targets: OnTargets | None = None) -> tuple[dict, LabelMatches]:
    """The evaluation and its per-image matches (label_matches.npz: what a paired comparison resamples); `on_targets`:
    what runs the images on targets (tools/validation/evaluate_targets.py), for a --target other than local."""
    from sdk.spec import load_pipeline
    from tools.evaluate.shards import detect_shards
    from tools.models.prepare import PrepareModel
    from tools.state import cache_dir

    progress = progress or SilentProgress()
    _check_request(request, on_targets)
    started = time.monotonic()
    pipeline = load_pipeline(request.pipeline)
    labels, mapping = checked_inputs(pipeline, request.labels, request.images)
    shards, not_run = [], []
    if request.target != LOCAL:  # the release on each target runs its part of the images (its own model and engine)
        fleet = on_targets(pipeline, labels, mapping, request.target, progress, request.partial)
        run, shards, not_run = fleet.run, fleet.shards, fleet.not_run
    else:
        task = progress.task("preparing the model", total=None)
        artifacts = PrepareModel(pipeline, cache_dir())()
        task.done()
        run = detect_shards(pipeline, artifacts, labels, mapping, request.shards, request.ray, progress)
    failed = {name for name, _ in run.not_decoded} | set(not_run)
    scored = [image for image in labels.images if image.name not in failed]
    if not scored:
        raise ConfigError(f"{labels.source}: none of the {len(labels.images)} images decodes", hint="check the image files")
    metrics, operating, worst = _score(pipeline, labels, mapping, scored, run.detections, request.draws, progress)
    checks = _judge(pipeline, mapping, metrics)
    verdict, checks, notes = combine(checks)
    if not checks:
        notes = ["no budget on labels (budgets.accuracy.map50_95, map50, min_recall_at_precision): nothing was judged"]
    notes += labels.notes
    if operating["score"] < pipeline.spec.evaluation.score_threshold:
        floor = pipeline.spec.evaluation.score_threshold
        notes.append(f"the operating score {operating['score']:g} is below the evaluation's score floor {floor:g}: detections start at the floor")
    if not_run:
        failed_targets = ", ".join(s["target"] for s in shards if "error" in s)
        notes.append(f"{len(not_run)} image(s) were not run ({failed_targets} failed) and were left out with their labels")
    if run.not_decoded:
        notes.append(f"{len(run.not_decoded)} image(s) did not decode and were left out with their labels: {', '.join(sorted(failed))}")
    if run.size_mismatch:
        notes.append(f"{len(run.size_mismatch)} image(s) are not the size their labels give, e.g. {run.size_mismatch[0]}")
    matches = from_evaluation(metrics.matches, [i.id for i in scored], sorted(set(mapping.to_category.values())), labels.ground_truth())
    check_dicts = [c.as_dict() for c in checks]
    return {
        "kind": "evaluation",
        "pipeline": pipeline.spec.name,
        "target": request.target,
        **metrics.headline(),
        "curves": metrics.curves,
        "operating_point": operating,
        "worst_images": worst,
        "verdict": verdict,
        "verdict_detail": describe_verdict(verdict, check_dicts),
        "checks": check_dicts,
        "notes": notes,
        "labels": {
            "path": str(labels.source),
            "format": labels.format,
            "images": len(labels.images),
            "images_scored": metrics.images,
            "labels": labels.labels,
            "crowd_regions": labels.regions,
            "not_decoded": [{"file": name, "why": why} for name, why in run.not_decoded],
            "sha256": matches.labels_sha256,
        },
        "matches_file": MATCHES_FILE,
        "class_map": mapping.as_dict(tuple(pipeline.class_names()), labels.categories),
        "evaluation": pipeline.spec.evaluation.model_dump(exclude={"labels", "images"})  # --labels is this run's, not the acceptance's
        | {"bootstrap_draws": metrics.draws, "bootstrap": "images resampled with replacement"},
        "evaluator": _evaluator(),
        "backend": run.backend,
        **({"targets": shards} if request.target != LOCAL else {}),
        "postprocess": run.postprocess,
        "detections": len(run.detections),
        "wall_s": round(time.monotonic() - started, 3),
    }, matches


def _check_request(request: Request, on_targets: OnTargets | None) -> None:
    """The request's own settings, before anything is read or run."""
    from tools.evaluate.shards import require_ray

    if request.shards < 1:
        raise ConfigError(f"--shards {request.shards}: allowed: 1 or more", hint="split the labelled images over this many workers")
    if request.target != LOCAL:
        if on_targets is None:  # a library caller that gave no way to reach targets
            raise ConfigError(f"--target {request.target}: this caller runs on local only", hint="evaluate with --target local")
        if request.shards != 1 or request.ray is not None:
            flag = "--ray" if request.ray is not None else f"--shards {request.shards}"
            raise ConfigError(
                f"{flag}: with --target {request.target} the targets are the shards (one each); allowed: {flag.split()[0]} with --target local",
                hint=f"leave out {flag.split()[0]}, or name a group of targets to split the images over",
            )
        resolve_fleet(request.target)  # an unknown target or an empty group, before anything runs
    elif request.partial:
        raise ConfigError("--allow-partial: only with a --target group (a target that fails leaves its images out)", hint="leave it out")
    if request.ray is not None:
        require_ray()  # before anything runs: one error line with the install command


def _score(pipeline: PipelineFile, labels: LabelSet, mapping: ClassMap, scored: list, detections: list[dict], draws: int, progress: Progress):
    """COCO's figures (with their intervals), the operating point's (merged into the per-class rows) and the worst images."""
    from tools.evaluate.metrics import evaluate as score
    from tools.evaluate.operating import operating_point
    from tools.evaluate.worst import worst_images

    task = progress.task("scoring with pycocotools, bootstrap over images", total=None)
    metrics = score(labels.ground_truth(), detections, sorted(set(mapping.to_category.values())), [i.id for i in scored], draws)
    task.done()
    settings = pipeline.spec.evaluation
    at_score = settings.operating_score if settings.operating_score is not None else pipeline.spec.postprocess.score_threshold
    task = progress.task("recall at precision, false positives per image, recall per bin; the worst images", total=None)
    operating = operating_point(metrics.evaluation, labels.categories, settings.recall_at_precision, at_score, metrics.draws)
    for entry, extra in zip(metrics.per_class, operating.pop("per_class"), strict=True):
        entry.update({key: value for key, value in extra.items() if key not in entry})
    worst = worst_images(metrics.evaluation, scored, labels.categories, at_score, settings.worst_images)
    task.done()
    return metrics, operating, worst


def _judge(pipeline: PipelineFile, mapping: ClassMap, metrics) -> list:
    """The budgets on labels: mAP's, and each budgeted class's recall at the evaluation's precision."""
    from tools.evaluate.judge import class_figures, label_checks

    budgets = pipeline.spec.budgets.accuracy
    stats, lower, intervals = class_figures(budgets, pipeline.class_names(), mapping.to_category, metrics.per_class)
    precision = pipeline.spec.evaluation.recall_at_precision
    return label_checks(budgets, metrics.stats | stats, metrics.lower_bounds | lower, metrics.intervals | intervals, metrics.images, precision)


def _evaluator() -> str:
    from importlib.metadata import version

    return f"pycocotools {version('pycocotools')} COCOeval (bbox)"


__all__ = ["LOCAL", "Request", "checked_inputs", "evaluate", "evaluate_run"]
