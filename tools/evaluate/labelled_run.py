"""An acceptance run judged on labels: a deploy's or `sdk validate`'s own detections scored against `evaluation.labels`.

The run replays a folder of images (`images://`); detections.jsonl names each frame's file (`file`), so each labelled
image finds the detections the target itself made on it, at the deployment's own thresholds (what the vehicle reports;
`sdk evaluate` scores the model at the evaluation's). An image shown more than once (a looped replay) is scored on its
first frame. pycocotools scores them (tools/evaluate/metrics.py), the budgets on labels are judged on the interval's
bound (tools/evaluate/judge.py) and the per-image matches are kept (label_matches.npz) for `sdk compare` and the
regression gate.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sdk.errors import ConfigError
from sdk.runtime.verdict import INCONCLUSIVE, BudgetCheck
from sdk.spec.loader import PipelineFile
from tools.evaluate.classmap import ClassMap
from tools.evaluate.labels import FORMATS, LabelSet
from tools.reports.detections_file import detection_records

DETECTIONS_FILE = "detections.jsonl"
SHOWN = 10  # image names a note lists before "and N more"


@dataclass
class Scored:
    section: dict  # report.json's `labels_evaluation`
    checks: list[BudgetCheck]
    matches: object | None  # LabelMatches, None when no labelled image was among the frames


def labels_of(pipeline: PipelineFile) -> tuple[Path, Path | None] | None:
    """`evaluation.labels` (and `evaluation.images`) resolved against the pipeline's folder, or None."""
    settings = pipeline.spec.evaluation
    if settings.labels is None:
        return None
    images = pipeline.resolve(settings.images, "evaluation.images") if settings.images is not None else None
    return pipeline.resolve(settings.labels, "evaluation.labels"), images


def pipeline_labels(pipeline: PipelineFile) -> tuple[LabelSet, ClassMap] | None:
    """The labels `evaluation.labels` names and the class map, checked; errors name the pipeline file and its key."""
    from tools.evaluate.run import checked_inputs

    found = labels_of(pipeline)
    if found is None:
        return None
    labels, images = found
    where = f"{pipeline.path}: evaluation"
    if not labels.exists():
        raise ConfigError(f"{where}.labels: {labels}: no such file or folder", hint=f"give {FORMATS}, relative to the pipeline file")
    if images is not None and labels.suffix.lower() in (".yaml", ".yml"):
        raise ConfigError(
            f"{where}.images: a YOLO dataset names its own images (`path` and `val` in {labels.name})", hint="leave out evaluation.images"
        )
    if images is not None and not images.is_dir():
        what = "not a folder (an acceptance run finds its frames by file name, not in a video)" if images.exists() else "no such folder"
        raise ConfigError(f"{where}.images: {images}: {what}", hint="the folder of the labelled images (MOTChallenge: the sequence's img1/)")
    try:
        return checked_inputs(pipeline, labels, images, f"{where}.images")
    except ConfigError as exc:
        if exc.message.startswith(f"{where}.images"):  # names the pipeline file and its key already
            raise
        raise ConfigError(f"evaluation.labels: {exc.message}", hint=exc.hint) from None


def checked_labels(pipeline: PipelineFile) -> tuple[LabelSet, ClassMap] | None:
    """The labels and the class map of a labelled pipeline, checked before anything is sent (None: no labels)."""
    if labels_of(pipeline) is None:
        return None
    uri = next(iter(pipeline.spec.cameras.values())).uri
    if pipeline.spec.multi_camera or not uri.startswith("images://"):
        where = "sources" if pipeline.spec.multi_camera else f"source.uri {uri}"
        raise ConfigError(
            f"{pipeline.path}: evaluation.labels needs one images:// source (its frames are found by file name); {where} is not one",
            hint="replay the labelled images (source.uri: images://FOLDER), or score other sources with sdk evaluate",
        )
    checked = pipeline_labels(pipeline)
    if checked is not None:
        _same_folder(pipeline, checked[0])
    return checked


def _same_folder(pipeline: PipelineFile, labels: LabelSet) -> None:
    """The images:// folder must be the labels' image folder: frames find their labels by bare file name, and another
    folder (KITTI's testing/image_2 beside training/image_2) holds files of the same names."""
    source = pipeline.source_file()
    folders = sorted({image.path.resolve().parent for image in labels.images})
    if source is None or not folders or source.resolve() in folders:
        return
    allowed = ", ".join(str(f) for f in folders[:3]) + (f" and {len(folders) - 3} more" if len(folders) > 3 else "")
    raise ConfigError(
        f"{pipeline.path}: {pipeline.source_key(next(iter(pipeline.spec.cameras)))} {source}: not the labelled images' folder; "
        f"allowed: {allowed} (the folder of the images evaluation.labels / evaluation.images name)",
        hint="point source.uri (images://FOLDER) and evaluation.images at the same folder of labelled images",
    )


def first_frames(path: Path) -> dict[str, list[tuple[str, float, list[float]]]]:
    """File name -> the detections (label, score, box) of its first frame, from detections.jsonl."""

    def read(record: dict):
        if "file" not in record:
            return None, None
        return record["file"], [(str(d["label"]), float(d["score"]), [float(v) for v in d["box"]]) for d in record["detections"]]

    return detection_records(path, read)


def coco_detections(frames: dict[str, list[tuple]], labels: LabelSet, mapping: ClassMap, class_names) -> tuple[list[dict], list, list[str]]:
    """COCO results of the labelled images among the frames, those images, and the labelled images not among them."""
    class_ids = {name: index for index, name in enumerate(class_names)}
    detections, scored, missing = [], [], []
    for image in labels.images:
        found = frames.get(image.path.name)
        if found is None:
            missing.append(image.path.name)
            continue
        scored.append(image)
        for label, score, box in found:
            category = mapping.to_category.get(class_ids.get(label, -1))
            if category is None:
                continue
            x1, y1, x2, y2 = box
            detections.append({"image_id": image.id, "category_id": category, "bbox": [x1, y1, x2 - x1, y2 - y1], "score": score})
    return detections, scored, missing


def score_run(pipeline: PipelineFile, report_dir: Path) -> Scored | None:
    """The run in `report_dir` scored on the pipeline's labels (None: the pipeline has none)."""
    from tools.evaluate.judge import label_checks
    from tools.evaluate.metrics import evaluate
    from tools.history.label_matches import MATCHES_FILE, from_evaluation

    checked = checked_labels(pipeline)
    if checked is None:
        return None
    labels, mapping = checked
    budgets = pipeline.spec.budgets.accuracy
    detections, scored, missing = coco_detections(first_frames(report_dir / DETECTIONS_FILE), labels, mapping, pipeline.class_names())
    post = pipeline.spec.postprocess
    section = {
        "labels": {"path": str(labels.source), "format": labels.format, "images": len(labels.images), "images_scored": len(scored)},
        "not_run": missing,
        "thresholds": f"the deployment's own: score at least {post.score_threshold:g}, {post.nms} NMS at IoU {post.iou_threshold:g}, "
        f"at most {post.max_detections} a frame",
        "notes": [],
    }
    if missing:
        shown = ", ".join(missing[:SHOWN]) + (f" and {len(missing) - SHOWN} more" if len(missing) > SHOWN else "")
        section["notes"].append(f"{len(missing)} labelled image(s) were not among the run's frames and were left out with their labels: {shown}")
    if not scored:
        detail = f"none of the {len(labels.images)} labelled images was among the run's frames"
        minimums = budgets.label_minimums() if budgets is not None else []
        return Scored(section, [BudgetCheck(f"accuracy.{name}", limit, None, INCONCLUSIVE, 0, None, detail) for name, limit in minimums], None)
    categories = sorted(set(mapping.to_category.values()))
    metrics = evaluate(labels.ground_truth(), detections, categories, [i.id for i in scored])
    matches = from_evaluation(metrics.matches, [i.id for i in scored], categories, labels.ground_truth())
    section |= {
        **metrics.headline(),
        "detections": len(detections),
        "bootstrap_draws": metrics.draws,
        "matches_file": MATCHES_FILE,
    }
    section["labels"]["sha256"] = matches.labels_sha256
    stats, lower, intervals = _class_figures(pipeline, budgets, metrics, labels, mapping, section)
    precision = pipeline.spec.evaluation.recall_at_precision
    checks = label_checks(budgets, metrics.stats | stats, metrics.lower_bounds | lower, metrics.intervals | intervals, metrics.images, precision)
    return Scored(section, [_on_frames(c) for c in checks], matches)


def _class_figures(pipeline: PipelineFile, budgets, metrics, labels: LabelSet, mapping: ClassMap, section: dict) -> tuple[dict, dict, dict]:
    """The budgeted classes' recall at the evaluation's precision (the operating point, computed only when a class has a
    budget; then in `section` too, at the deployment's score threshold)."""
    from tools.evaluate.judge import class_figures
    from tools.evaluate.operating import operating_point

    if budgets is None or not budgets.min_recall_at_precision:
        return {}, {}, {}
    precision, score = pipeline.spec.evaluation.recall_at_precision, pipeline.spec.postprocess.score_threshold
    operating = operating_point(metrics.evaluation, labels.categories, precision, score, metrics.draws)
    section["operating_point"] = operating
    return class_figures(budgets, pipeline.class_names(), mapping.to_category, operating["per_class"])


def _on_frames(check: BudgetCheck) -> BudgetCheck:
    from dataclasses import replace

    return replace(check, detail=f"{check.detail}; the run's own detections at the deployment's thresholds")


__all__ = ["Scored", "checked_labels", "coco_detections", "first_frames", "labels_of", "pipeline_labels", "score_run"]
