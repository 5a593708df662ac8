"""COCO's detection metrics from pycocotools' `COCOeval` (decision 1001), and their bootstrap intervals over images.

Every figure is pycocotools': mAP@[.5:.95], AP50, AP75, AP small / medium / large, AR@1/10/100 and AR small /
medium / large (`stats`), and per category AP and AP50 from its precision table (IoU threshold x recall threshold x
category x area x max detections), area `all`, 100 detections an image. The intervals resample the images with
replacement (the images are the independent units of a labelled set) and recompute mAP@[.5:.95] and AP50 from
COCOeval's own per-image matches (`evalImgs`: which detection matched which label at each IoU threshold, which are
ignored): a drawn image's detections and labels count as often as it was drawn. Accumulating them with every image
drawn once gives COCOeval's figures exactly (tested), so only the resampling is the SDK's.
"""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass

import numpy as np

from tools.history.label_matches import CONFIDENCE, DRAW_CHUNK, accumulate
from tools.history.stats import DRAWS, SEED, block_indices

STAT_NAMES = ("map50_95", "map50", "map75", "map_small", "map_medium", "map_large", "ar1", "ar10", "ar100", "ar_small", "ar_medium", "ar_large")
# The bootstrap's work is draws x detections x 10 IoU thresholds: past this many detection-draws a large set gets
# fewer draws (at least MIN_DRAWS; its interval is narrow anyway).
DETECTION_DRAWS = 10_000_000
MIN_DRAWS = 200


def affordable_draws(draws: int, detections: int) -> int:
    """`draws`, or fewer for a large set (never below MIN_DRAWS, never more than asked)."""
    return min(draws, max(MIN_DRAWS, DETECTION_DRAWS // max(detections, 1)))


@dataclass
class Metrics:
    stats: dict[str, float | None]  # STAT_NAMES -> value (None: no labels of that size)
    per_class: list[dict]  # category id, name, labels, detections, ap50_95, ap50
    intervals: dict[str, list[float] | None]  # map50_95, map50 -> [lower, upper], two-sided 95 %
    lower_bounds: dict[str, float | None]  # map50_95, map50 -> one-sided 95 % lower bound (budgets)
    curves: dict[str, list[float]]  # recall thresholds; mean precision at IoU 0.5 and over 0.5:0.95 (area all, 100 a image)
    images: int
    draws: int
    matches: list[dict] | None = None  # COCOeval's per-image matches (image_matches): what a paired comparison resamples
    evaluation: object = None  # pycocotools' COCOeval, evaluated and accumulated (the operating point, the worst images)

    def headline(self) -> dict:
        """The figures every evaluation report carries under these names (`sdk evaluate`'s and a labelled run's)."""
        return {
            "map50_95": self.stats["map50_95"],
            "map50": self.stats["map50"],
            "intervals": self.intervals,
            "lower_bounds": self.lower_bounds,
            "metrics": self.stats,
            "per_class": self.per_class,
        }


def _quiet(call, *args):
    with contextlib.redirect_stdout(io.StringIO()):
        return call(*args)


def coco_eval(ground_truth: dict, detections: list[dict], category_ids: list[int], image_ids: list[int]):
    """pycocotools' COCOeval (bbox) after evaluate() and accumulate(), on these categories and images."""
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    gt = COCO()
    gt.dataset = ground_truth
    _quiet(gt.createIndex)
    dt = COCO()
    results = [
        {**d, "id": i + 1, "area": float(d["bbox"][2] * d["bbox"][3]), "iscrowd": 0} for i, d in enumerate(detections)
    ]  # as COCO.loadRes makes them, which refuses an empty list
    dt.dataset = {"images": ground_truth["images"], "categories": ground_truth["categories"], "annotations": results}
    _quiet(dt.createIndex)
    evaluation = COCOeval(gt, dt, "bbox")
    evaluation.params.catIds = sorted(category_ids)
    evaluation.params.imgIds = sorted(image_ids)
    _quiet(evaluation.evaluate)
    _quiet(evaluation.accumulate)
    _quiet(evaluation.summarize)
    return evaluation


def evaluate(ground_truth: dict, detections: list[dict], category_ids: list[int], image_ids: list[int], draws: int = DRAWS) -> Metrics:
    evaluation = coco_eval(ground_truth, detections, category_ids, image_ids)
    stats = {name: (None if value < 0 else round(float(value), 6)) for name, value in zip(STAT_NAMES, evaluation.stats, strict=True)}
    precision = evaluation.eval["precision"]  # [T, R, K, A, M]
    names = {c["id"]: c["name"] for c in ground_truth["categories"]}
    scored = set(image_ids)
    labels_per = _count(a["category_id"] for a in ground_truth["annotations"] if not a.get("iscrowd") and a["image_id"] in scored)
    found_per = _count(d["category_id"] for d in detections)
    per_class = []
    for k, cid in enumerate(evaluation.params.catIds):
        table = precision[:, :, k, 0, -1]
        ap = float(table[table > -1].mean()) if (table > -1).any() else None
        ap50 = float(table[0][table[0] > -1].mean()) if (table[0] > -1).any() else None
        per_class.append(
            {
                "category_id": int(cid),
                "name": names[cid],
                "labels": int(labels_per.get(cid, 0)),
                "detections": int(found_per.get(cid, 0)),
                "ap50_95": None if ap is None else round(ap, 6),
                "ap50": None if ap50 is None else round(ap50, 6),
            }
        )
    curves = _curves(evaluation)
    draws = affordable_draws(draws, len(detections)) if draws else 0
    figures = bootstrap(evaluation, draws) if draws else None
    intervals, lower = {}, {}
    for index, name in enumerate(("map50_95", "map50")):
        values = None if figures is None else figures[:, index][np.isfinite(figures[:, index])]
        if values is None or len(values) < draws // 2 or stats[name] is None:
            intervals[name], lower[name] = None, None
            continue
        low, high = np.quantile(values, [(1 - CONFIDENCE) / 2, (1 + CONFIDENCE) / 2])
        intervals[name] = [round(float(low), 6), round(float(high), 6)]
        lower[name] = round(float(np.quantile(values, 1 - CONFIDENCE)), 6)
    return Metrics(stats, per_class, intervals, lower, curves, len(image_ids), draws, image_matches(evaluation), evaluation)


def _count(values) -> dict[int, int]:
    counts: dict[int, int] = {}
    for value in values:
        counts[value] = counts.get(value, 0) + 1
    return counts


def _curves(evaluation) -> dict[str, list[float]]:
    precision = evaluation.eval["precision"][:, :, :, 0, -1]  # [T, R, K]
    valid = (precision > -1).all(axis=(0, 1))
    if not valid.any():
        return {}
    kept = precision[:, :, valid]
    return {
        "recall": [round(float(r), 4) for r in evaluation.params.recThrs],
        "precision50": [round(float(v), 6) for v in kept[0].mean(axis=1)],
        "precision50_95": [round(float(v), 6) for v in kept.mean(axis=(0, 2))],
        "per_class50": {  # category id -> interpolated precision at IoU 0.5 (the classes with labels)
            str(cid): [round(float(v), 4) for v in precision[0, :, k]] for k, cid in enumerate(evaluation.params.catIds) if valid[k]
        },
    }


def image_matches(evaluation) -> list[dict]:
    """Per category (area all, at most maxDets[-1] a image): its detections best first (COCO's mergesort order), the image
    each came from, its score, whether each is a true or false positive at each IoU threshold, and the labels per image."""
    params = evaluation._paramsEval
    images = len(params.imgIds)
    areas = len(params.areaRng)
    max_det = params.maxDets[-1]
    out = []
    for k in range(len(params.catIds)):
        entries = [(i, evaluation.evalImgs[k * areas * images + i]) for i in range(images)]
        entries = [(i, e) for i, e in entries if e is not None]
        labels = np.zeros(images, np.int64)
        for i, e in entries:
            labels[i] = int(np.count_nonzero(np.asarray(e["gtIgnore"]) == 0))
        if not entries:
            empty = np.zeros((len(params.iouThrs), 0), bool)
            out.append({"labels": labels, "image": np.zeros(0, np.int64), "score": np.zeros(0), "tp": empty, "fp": empty})
            continue
        scores = np.concatenate([np.asarray(e["dtScores"][:max_det]) for _, e in entries])
        order = np.argsort(-scores, kind="mergesort")
        image = np.concatenate([np.full(len(e["dtScores"][:max_det]), i) for i, e in entries])[order]
        matched = np.concatenate([e["dtMatches"][:, :max_det] for _, e in entries], axis=1)[:, order]
        ignored = np.concatenate([e["dtIgnore"][:, :max_det] for _, e in entries], axis=1)[:, order]
        tp = np.logical_and(matched, np.logical_not(ignored))
        fp = np.logical_and(np.logical_not(matched), np.logical_not(ignored))
        out.append({"labels": labels, "image": image, "score": scores[order], "tp": tp, "fp": fp})
    return out


def draw_weights(images: int, draws: int, seed: int = SEED):
    """Chunks of [chunk, images]: how often each image is drawn in each bootstrap draw (with replacement, fixed seed).
    Every figure's interval of one evaluation is taken over the same draws."""
    rng = np.random.default_rng(seed)
    for start in range(0, draws, DRAW_CHUNK):
        chunk = min(DRAW_CHUNK, draws - start)
        drawn = block_indices(rng, images, 1, chunk)  # block length 1: each image drawn on its own
        yield np.stack([np.bincount(row, minlength=images) for row in drawn])


def bootstrap(evaluation, draws: int = DRAWS, seed: int = SEED) -> np.ndarray:
    """[draws, 2] replicates of mAP@[.5:.95] and AP50 over images resampled with replacement (fixed seed)."""
    matches = image_matches(evaluation)
    thresholds = np.asarray(evaluation.params.recThrs)
    images = len(evaluation._paramsEval.imgIds)
    return np.concatenate([accumulate(matches, weights, thresholds) for weights in draw_weights(images, draws, seed)])


__all__ = [
    "CONFIDENCE",
    "STAT_NAMES",
    "Metrics",
    "accumulate",
    "affordable_draws",
    "bootstrap",
    "coco_eval",
    "draw_weights",
    "evaluate",
    "image_matches",
]
