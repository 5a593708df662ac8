"""What automotive reviewers ask for beside COCO's mAP, from COCOeval's own matches at IoU 0.5 (area all, 100
detections an image): per class the recall reached at a fixed precision (default 0.9) and the score where it is
reached; at an operating score (default: the deployment's `postprocess.score_threshold`) the recall and the false
positives per image, per class and over all classes; and the recall per bin of the labels (object size as COCO bins
it; KITTI's truncation, occlusion and difficulty levels; MOTChallenge's visibility), with each figure's 95 % interval over the same
bootstrap draws of the images as mAP's.

Recall at precision p is the largest recall of a detection (best first, COCO's order) whose precision is at least p:
the precision envelope is at least p up to that recall and below it after, so COCOeval's own precision table
(`eval["precision"]`, 101 recall points) reaches p up to the largest of its recall points at or below it (tested).
A label counts as found at the operating score when COCOeval matched it to a detection scoring at least that: COCO
matches greedily best first, so the detections below a score never change the matches of those above it. Detections
COCOeval ignores (on crowd, DontCare and MOTChallenge's ignore regions) are neither hits nor false positives.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tools.evaluate.metrics import CONFIDENCE, draw_weights, image_matches

IOU_INDEX = 0  # COCO's first IoU threshold, 0.5
SIZE_BINS = (("small (under 32²)", 0.0, 32.0**2), ("medium (32² to 96²)", 32.0**2, 96.0**2), ("large (96² and above)", 96.0**2, np.inf))  # COCO's
TRUNCATION_BINS = (("0 to 0.15", 0.0, 0.15), ("0.15 to 0.3", 0.15, 0.3), ("0.3 to 0.5", 0.3, 0.5), ("above 0.5", 0.5, 1.01))  # KITTI's
OCCLUSION_BINS = {0: "fully visible", 1: "partly occluded", 2: "largely occluded", 3: "unknown"}  # KITTI's levels
# KITTI's difficulty levels (its object devkit: box height at least, occlusion and truncation at most), cumulative as
# its benchmark counts them: a moderate object is also every easy one; a label of unknown occlusion (3) is in none.
KITTI_DIFFICULTY = (("easy", 40.0, 0, 0.15), ("moderate", 25.0, 1, 0.3), ("hard", 25.0, 2, 0.5))
VISIBILITY_BINS = (("under 0.25", 0.0, 0.25), ("0.25 to 0.5", 0.25, 0.5), ("0.5 to 0.75", 0.5, 0.75), ("0.75 and above", 0.75, 1.01))


@dataclass
class Found:
    """Every scored label (ignore regions aside) at IoU 0.5: its image (index into the scored images), category index,
    the score of the detection COCOeval matched it to (-inf: none) and the label itself."""

    image: np.ndarray
    category: np.ndarray
    score: np.ndarray
    labels: list[dict]


def found_labels(evaluation) -> Found:
    params = evaluation._paramsEval
    images, areas = len(params.imgIds), len(params.areaRng)
    rows: list[tuple[int, int, float, dict]] = []
    for k in range(len(params.catIds)):
        for i in range(images):
            entry = evaluation.evalImgs[k * areas * images + i]
            if entry is None:
                continue
            scores = dict(zip(entry["dtIds"], entry["dtScores"], strict=True))
            for g, gt_id in enumerate(entry["gtIds"]):
                if entry["gtIgnore"][g]:
                    continue
                matched = int(entry["gtMatches"][IOU_INDEX, g])
                rows.append((i, k, scores[matched] if matched else -np.inf, evaluation.cocoGt.anns[gt_id]))
    return Found(
        np.array([r[0] for r in rows], np.int64), np.array([r[1] for r in rows], np.int64), np.array([r[2] for r in rows]), [r[3] for r in rows]
    )


def recall_at_precision(category: dict, weights: np.ndarray, precision: float) -> tuple[np.ndarray, np.ndarray]:
    """[D] recall at `precision` and [D] the index of the detection reaching it (-1: none), image i counted weights[d, i]
    times; NaN where a draw holds no label of the category."""
    labels = weights @ category["labels"]
    if category["image"].size == 0:
        return np.where(labels > 0, 0.0, np.nan), np.full(len(labels), -1)
    w = weights[:, category["image"]].astype(np.float64)
    tp = np.cumsum(w * category["tp"][IOU_INDEX], axis=1)
    fp = np.cumsum(w * category["fp"][IOU_INDEX], axis=1)
    recall = tp / np.where(labels > 0, labels, 1)[:, None]
    reached = (tp / (tp + fp + np.spacing(1)) >= precision) & (tp > 0)
    best = np.where(reached, recall, -1.0)
    index = best.argmax(axis=1)
    value = np.where(best.max(axis=1) >= 0, best.max(axis=1), 0.0)
    return np.where(labels > 0, value, np.nan), np.where(best.max(axis=1) >= 0, index, -1)


def false_positives(category: dict, weights: np.ndarray, score: float) -> np.ndarray:
    """[D] false positives scoring at least `score`, image i counted weights[d, i] times."""
    if category["image"].size == 0:
        return np.zeros(len(weights))
    kept = category["fp"][IOU_INDEX] & (category["score"] >= score)
    return weights[:, category["image"]] @ kept.astype(np.float64)


def bins(found: Found) -> list[tuple[str, str, np.ndarray]]:
    """(attribute, bin, mask over the found labels) for each bin that holds labels: size always; truncation, occlusion
    and KITTI's difficulty levels where the labels carry them (KITTI), visibility (MOTChallenge)."""
    out = []
    area = np.array([label["area"] for label in found.labels], np.float64)
    out += [("size", name, (area >= low) & (area < high)) for name, low, high in SIZE_BINS]
    for attribute, table in (("truncated", TRUNCATION_BINS), ("visibility", VISIBILITY_BINS)):
        values = np.array([label.get(attribute, np.nan) for label in found.labels], np.float64)
        if np.isfinite(values).any():
            out += [(attribute, name, (values >= low) & (values < high)) for name, low, high in table]
    occluded = np.array([label.get("occluded", -1) for label in found.labels])
    if (occluded >= 0).any():
        out += [("occluded", f"{level} {name}", occluded == level) for level, name in OCCLUSION_BINS.items()]
        height = np.array([label["bbox"][3] for label in found.labels], np.float64)
        truncated = np.array([label.get("truncated", np.inf) for label in found.labels], np.float64)
        out += [
            ("difficulty", name, (height >= low) & (occluded >= 0) & (occluded <= most) & (truncated <= cut))
            for name, low, most, cut in KITTI_DIFFICULTY
        ]
    return [(attribute, name, mask) for attribute, name, mask in out if mask.any()]


def _interval(values: np.ndarray) -> list[float] | None:
    values = values[np.isfinite(values)]
    if len(values) < 2:
        return None
    low, high = np.quantile(values, [(1 - CONFIDENCE) / 2, (1 + CONFIDENCE) / 2])
    return [round(float(low), 6), round(float(high), 6)]


def _lower(values: np.ndarray, draws: int) -> float | None:
    """The one-sided 95 % lower bound (what a minimum is judged on), as metrics.py takes mAP's: None when under half
    the draws hold the figure."""
    values = values[np.isfinite(values)]
    if len(values) < 2 or len(values) < draws // 2:
        return None
    return round(float(np.quantile(values, 1 - CONFIDENCE)), 6)


def _ratio(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(denominator > 0, numerator / np.where(denominator > 0, denominator, 1), np.nan)


def operating_point(evaluation, names: dict[int, str], precision: float, score: float, draws: int) -> dict:
    """report.json's `operating_point`: the figures, each with its interval (None without draws or labels)."""
    matches = image_matches(evaluation)
    found = found_labels(evaluation)
    images = len(evaluation._paramsEval.imgIds)
    groups = bins(found)
    ones = np.ones((1, images), np.int64)
    chunks = [ones, *draw_weights(images, draws)] if draws else [ones]
    at_precision: list[list[np.ndarray]] = [[] for _ in matches]
    false: list[list[np.ndarray]] = [[] for _ in matches]
    found_now = found.score >= score
    # Labels per image (rows) and class or bin (columns), all and found: a draw's counts are its weights times these.
    columns = [found.category == k for k in range(len(matches))] + [mask for _, _, mask in groups]
    every, hit = np.zeros((images, len(columns))), np.zeros((images, len(columns)))
    for c, mask in enumerate(columns):
        every[:, c] = np.bincount(found.image[mask], minlength=images)
        hit[:, c] = np.bincount(found.image[mask & found_now], minlength=images)
    counted, hits = [], []
    for weights in chunks:
        for k, category in enumerate(matches):
            at_precision[k].append(recall_at_precision(category, weights, precision)[0])
            false[k].append(false_positives(category, weights, score))
        counted.append(weights @ every)
        hits.append(weights @ hit)
    hits, counted = np.concatenate(hits), np.concatenate(counted)
    ratios = _ratio(hits, counted)  # [draws + 1, columns]: recall per class, then per bin (row 0: every image once)
    classes = len(matches)
    recall = _ratio(hits[:, :classes].sum(axis=1), counted[:, :classes].sum(axis=1))
    drawn = np.concatenate([c.sum(axis=1) for c in chunks])  # images per draw
    fp_all = np.sum([np.concatenate(f) for f in false], axis=0)
    per_class = []
    for k, category in enumerate(matches):
        value = np.concatenate(at_precision[k])
        fp = np.concatenate(false[k])
        index = recall_at_precision(category, ones, precision)[1][0]
        per_class.append(
            {
                "category_id": int(evaluation.params.catIds[k]),
                "name": names[evaluation.params.catIds[k]],
                "recall_at_precision": _round(value[0]),
                "recall_at_precision_interval": _interval(value[1:]),
                "recall_at_precision_lower": _lower(value[1:], draws),
                "score_at_precision": None if index < 0 else round(float(category["score"][index]), 6),
                "recall": _round(ratios[0, k]),
                "recall_interval": _interval(ratios[1:, k]),
                "fp_per_image": _round(fp[0] / images),
                "fp_per_image_interval": _interval(fp[1:] / drawn[1:]),
            }
        )
    figures = []
    for b, (attribute, name, mask) in enumerate(groups):
        ratio = ratios[:, classes + b]
        figures.append({"attribute": attribute, "bin": name, "labels": int(mask.sum()), "recall": _round(ratio[0]), "interval": _interval(ratio[1:])})
    return {
        "iou": 0.5,
        "precision": precision,
        "score": score,
        "recall": _round(recall[0]),
        "recall_interval": _interval(recall[1:]),
        "fp_per_image": _round(fp_all[0] / images),
        "fp_per_image_interval": _interval(fp_all[1:] / drawn[1:]),
        "per_class": per_class,
        "bins": figures,
        "bootstrap_draws": draws,
    }


def per_image_errors(evaluation, score: float) -> tuple[np.ndarray, np.ndarray]:
    """[images] labels missed and [images] false positives at the operating score (IoU 0.5)."""
    images = len(evaluation._paramsEval.imgIds)
    found = found_labels(evaluation)
    missed = np.bincount(found.image[found.score < score], minlength=images)
    false = np.zeros(images, np.int64)
    for category in image_matches(evaluation):
        kept = category["fp"][IOU_INDEX] & (category["score"] >= score) if category["image"].size else np.zeros(0, bool)
        false += np.bincount(category["image"][kept], minlength=images)
    return missed, false


def _round(value: float) -> float | None:
    return None if not np.isfinite(value) else round(float(value), 6)


__all__ = ["Found", "bins", "false_positives", "found_labels", "operating_point", "per_image_errors", "recall_at_precision"]
