"""The gate on labels: a candidate model (INT8 Q/DQ, an optimized one) against the FP32 original on `evaluation.labels`.

Beside the agreement checks (tools/int8/accuracy.py), `sdk calibrate` and `sdk optimize` run the FP32 model and each
candidate on the labelled images through the evaluation's stages (tools/evaluate/detect.py) and score both with
pycocotools. The drop of mAP@[.5:.95] (FP32 minus candidate) gets a paired bootstrap interval over the images
(tools/history/label_matches.py), and is judged as every budget is: FAIL (the candidate is refused) when the measured drop
exceeds `calibration.accuracy.max_map_drop` (default 0.01, one point); PASS when the one-sided 95 % upper bound of the
drop is within it; INCONCLUSIVE otherwise, with about how many images would settle it. INCONCLUSIVE does not refuse:
what the labels cannot show is said, not turned into a refusal.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from sdk.artifacts import ModelArtifacts
from sdk.spec.loader import PipelineFile
from tools.evaluate.classmap import ClassMap
from tools.evaluate.labelset import LabelSet
from tools.progress import Progress, SilentProgress

CONFIDENCE = 0.95


@dataclass
class LabelGate:
    """The FP32 model's evaluation on the labels (made once), against which each candidate is judged."""

    pipeline: PipelineFile
    artifacts: ModelArtifacts
    labels: LabelSet
    mapping: ClassMap
    limit: float
    draws: int = 2000
    _reference: object | None = None  # LabelMatches of the FP32 model

    @classmethod
    def of(cls, pipeline: PipelineFile, artifacts: ModelArtifacts, limit: float) -> LabelGate | None:
        """The gate where the pipeline names `evaluation.labels` (checked here, before anything runs), else None."""
        from tools.evaluate.labelled_run import pipeline_labels

        found = pipeline_labels(pipeline)
        if found is None:
            return None
        return cls(pipeline, artifacts, *found, limit)

    def key(self) -> str:
        """What the gate's verdict rests on besides the models: the labels, the class map, the settings and the limit."""
        from tools.history.label_matches import labels_hash

        truth = self.labels.ground_truth()
        labels = labels_hash(truth, [i.id for i in self.labels.images], sorted(set(self.mapping.to_category.values())))
        return f"{labels[:16]}-{self.pipeline.spec.evaluation.model_dump_json()}-{self.limit}"

    def _matches(self, model: Path | None, progress: Progress):
        from tools.evaluate.detect import detect
        from tools.evaluate.metrics import evaluate
        from tools.history.label_matches import from_evaluation

        run = detect(self.pipeline, self.artifacts, self.labels, self.mapping, progress, model=model)
        failed = {name for name, _ in run.not_decoded}
        scored = [i.id for i in self.labels.images if i.name not in failed]
        categories = sorted(set(self.mapping.to_category.values()))
        truth = self.labels.ground_truth()
        metrics = evaluate(truth, run.detections, categories, scored, draws=0)
        return from_evaluation(metrics.matches, scored, categories, truth)

    def judge(self, candidate: Path, progress: Progress | None = None, name: str = "candidate") -> dict:
        """The candidate's mAP against the FP32 model's on the labels: figures, the drop's interval, status, failure."""
        from tools.history.label_matches import paired_difference

        progress = progress or SilentProgress()
        if self._reference is None:
            self._reference = self._matches(self.artifacts.model_path, progress)
        found = paired_difference(self._reference, self._matches(candidate, progress), confidence=2 * CONFIDENCE - 1, draws=self.draws)
        figure = found["map50_95"]
        if not figure.bounded:
            return self._unbounded(figure, found["map50"])
        drop = -figure.difference
        upper = -figure.lower_bound(CONFIDENCE)  # the one-sided 95 % upper bound of the drop
        images = len(self._reference.image_ids)
        interval = [round(-figure.interval[1], 6), round(-figure.interval[0], 6)]
        shown = (
            f"FP32 {figure.a:.4f}, {name} {figure.b:.4f}; drop {drop:.4f}, 90% interval {interval[0]:.4f} to {interval[1]:.4f} over {images} images"
        )
        if drop > self.limit:
            status, needed = "FAIL", None
        elif upper <= self.limit:
            status, needed = "PASS", None
        else:
            status, needed = "INCONCLUSIVE", _images_needed(drop, upper, self.limit, images)
        failure = f"mAP@[.5:.95] on labels: {shown}, above the allowed drop {self.limit:g}" if status == "FAIL" else None
        return {
            "labels": str(self.labels.source),
            "images": images,
            "map50_95_fp32": round(figure.a, 6),
            "map50_95": round(figure.b, 6),
            "map50_fp32": round(found["map50"].a, 6),
            "map50": round(found["map50"].b, 6),
            "drop": round(drop, 6),
            "drop_interval": interval,
            "drop_upper_bound": round(upper, 6),
            "max_map_drop": self.limit,
            "status": status,
            "images_needed": needed,
            "detail": shown,
            "failure": failure,
        }

    def _unbounded(self, figure, map50) -> dict:
        """No bootstrap draw is finite (no scored image holds a labelled object): no interval, INCONCLUSIVE, a note why."""
        images = len(self._reference.image_ids)
        shown = f"no interval: none of the {images} scored images holds a labelled object, so the drop cannot be judged"
        return {
            "labels": str(self.labels.source),
            "images": images,
            "map50_95_fp32": _point(figure.a),
            "map50_95": _point(figure.b),
            "map50_fp32": _point(map50.a),
            "map50": _point(map50.b),
            "drop": _point(-figure.difference),
            "drop_interval": None,
            "drop_upper_bound": None,
            "max_map_drop": self.limit,
            "status": "INCONCLUSIVE",
            "images_needed": None,
            "detail": shown,
            "failure": None,
        }


def _images_needed(drop: float, upper: float, limit: float, images: int) -> int | None:
    """Images for the upper bound to come within the limit, at the same drop and spread; None when no number of images
    can (the drop itself reaches the limit, as with `max_map_drop: 0`)."""
    if limit - drop <= 0:
        return None
    return math.ceil(images * ((upper - drop) / (limit - drop)) ** 2)


def _point(value: float) -> float | None:
    return round(value, 6) if math.isfinite(value) else None


__all__ = ["LabelGate"]
