"""Two evaluations of the same labelled images, compared image by image: the mAP difference with a paired bootstrap.

An evaluation keeps COCOeval's per-image matches (which detection matched a label at each IoU threshold, which were
ignored, how many labels each image holds) in `label_matches.npz` beside its report.json. Two such files over the same
images and the same labels are paired: every bootstrap draw resamples the images once and counts each drawn image as
often in both evaluations, so what the images share (a hard image is hard for both models) cancels out of the
difference, and its interval is that of the difference itself, far narrower than two separate intervals would allow.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sdk.errors import ConfigError
from tools.history.stats import DRAWS, SEED, block_indices

CONFIDENCE = 0.95
DRAW_CHUNK = 200  # draws accumulated at once (memory: chunk x 10 IoU thresholds x a category's detections)
MATCHES_FILE = "label_matches.npz"
FIGURES = ("map50_95", "map50")  # what accumulate() gives, in its column order
RECALL_THRESHOLDS = np.linspace(0.0, 1.0, 101)  # COCOeval's recThrs


@dataclass(frozen=True)
class LabelMatches:
    """COCOeval's per-image matches of one evaluation (tools/evaluate/metrics.py: image_matches), and what they rest on."""

    image_ids: np.ndarray  # [N], sorted (COCOeval's order)
    category_ids: np.ndarray  # [K], sorted
    matches: list[dict]  # per category: labels [N], image [n], tp [T, n], fp [T, n] (best first)
    recall_thresholds: np.ndarray
    labels_sha256: str  # of the ground truth scored (images, categories, annotations)

    def figures(self) -> np.ndarray:
        """mAP@[.5:.95] and AP50 with every image counted once (COCOeval's own figures)."""
        return accumulate(self.matches, np.ones((1, len(self.image_ids)), np.int64), self.recall_thresholds)[0]


def accumulate(matches: list[dict], weights: np.ndarray, recall_thresholds: np.ndarray) -> np.ndarray:
    """[draws, 2]: mAP@[.5:.95] and AP50 with image i counted weights[d, i] times in draw d (COCOeval's accumulate)."""
    draws = weights.shape[0]
    steps = len(recall_thresholds)
    ap = np.full((draws, len(matches), 2), np.nan)
    for k, category in enumerate(matches):
        labels = weights @ category["labels"]  # [D]
        n = category["image"].size
        present = labels > 0
        if n == 0:
            ap[present, k, :] = 0.0
            continue
        if not present.any():
            continue  # no draw holds a label of it: left out of every draw (COCO leaves such a category out)
        # Only the draws that hold a label of it: a draw without one is left out below, and each draw's figures
        # depend on its own row alone (the sums run along the detections), so they come out the same.
        drawn = weights if present.all() else weights[present]
        w = drawn[:, category["image"]].astype(np.float64)  # [d, n]
        # In place, each array's values as written out: tp, fp = cumsum(w tp), cumsum(w fp); precision = tp / (fp + tp +
        # eps); recall = tp / labels; the envelope max(precision[j:]). (The weights are counts: every cumsum is exact.)
        tp = w[:, None, :] * category["tp"][None]  # [d, T, n]
        np.cumsum(tp, axis=2, out=tp)
        fp = w[:, None, :] * category["fp"][None]
        np.cumsum(fp, axis=2, out=fp)
        fp += tp
        fp += np.spacing(1)
        precision = np.divide(tp, fp, out=fp)
        recall = np.divide(tp, labels[present][:, None, None], out=tp)
        np.maximum.accumulate(precision[..., ::-1], axis=-1, out=precision[..., ::-1])  # NumPy resolves the overlap
        envelope = precision  # the precision envelope
        # COCO samples the envelope at each recall threshold r: at the first detection whose recall reaches r (0 where
        # none does). Detection j is that detection for the thresholds in (recall[j - 1], recall[j]]: weigh it by their
        # count instead of sampling, which is the same sum without a dimension of 101 thresholds.
        reached = np.searchsorted(recall_thresholds, recall.ravel(), side="right").reshape(recall.shape)
        hits = reached.copy()
        hits[..., 1:] -= reached[..., :-1]  # np.diff(reached, prepend=0)
        area = (envelope * hits).sum(axis=-1) / steps  # [d, T]
        ap[present, k, 0] = area.mean(axis=1)
        ap[present, k, 1] = area[:, 0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a draw without any label of a category: COCO leaves it out
        return np.nanmean(ap, axis=1)


def labels_hash(ground_truth: dict, image_ids, category_ids) -> str:
    """The ground truth an evaluation scored, as one hash: the same images, categories and labels, or not."""
    images, categories = {int(i) for i in image_ids}, {int(c) for c in category_ids}
    kept = sorted(
        (a["image_id"], a["category_id"], [round(float(v), 3) for v in a["bbox"]], int(a.get("iscrowd", 0)))
        for a in ground_truth["annotations"]
        if a["image_id"] in images and a["category_id"] in categories
    )
    text = json.dumps({"images": sorted(images), "categories": sorted(categories), "labels": kept}, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def from_evaluation(matches: list[dict], image_ids, category_ids, ground_truth: dict) -> LabelMatches:
    images, categories = np.asarray(sorted(image_ids), np.int64), np.asarray(sorted(category_ids), np.int64)
    return LabelMatches(images, categories, matches, RECALL_THRESHOLDS, labels_hash(ground_truth, images, categories))


def write_matches(found: LabelMatches, folder: Path) -> Path:
    """label_matches.npz in `folder`: detections as bit masks over the IoU thresholds (one bit a threshold)."""
    thresholds = found.matches[0]["tp"].shape[0] if found.matches else 10
    weights = (1 << np.arange(thresholds)).astype(np.int64)[:, None]
    category, image, tp, fp = [], [], [], []
    for k, entry in enumerate(found.matches):
        n = entry["image"].size
        category.append(np.full(n, k, np.int32))
        image.append(entry["image"].astype(np.int32))
        tp.append((entry["tp"].astype(np.int64) * weights).sum(axis=0) if n else np.zeros(0, np.int64))
        fp.append((entry["fp"].astype(np.int64) * weights).sum(axis=0) if n else np.zeros(0, np.int64))
    path = Path(folder) / MATCHES_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".partial.npz")
    np.savez_compressed(
        temporary,
        image_ids=found.image_ids,
        category_ids=found.category_ids,
        labels=np.stack([e["labels"] for e in found.matches]) if found.matches else np.zeros((0, len(found.image_ids)), np.int64),
        det_category=np.concatenate(category) if category else np.zeros(0, np.int32),
        det_image=np.concatenate(image) if image else np.zeros(0, np.int32),
        det_tp=np.concatenate(tp).astype(np.uint16) if tp else np.zeros(0, np.uint16),
        det_fp=np.concatenate(fp).astype(np.uint16) if fp else np.zeros(0, np.uint16),
        thresholds=np.asarray(thresholds),
        recall_thresholds=found.recall_thresholds,
        labels_sha256=np.asarray(found.labels_sha256),
    )
    temporary.replace(path)
    return path


def read_matches(path: Path) -> LabelMatches:
    """label_matches.npz back as matches accumulate() takes; a damaged file is an error naming it."""
    try:
        with np.load(Path(path), allow_pickle=False) as data:
            stored = {key: data[key] for key in data.files}
        thresholds = int(stored["thresholds"])
        bits = (1 << np.arange(thresholds)).astype(np.int64)[:, None]
        matches = []
        for k in range(len(stored["category_ids"])):
            mine = stored["det_category"] == k
            tp = (stored["det_tp"][mine].astype(np.int64)[None, :] & bits) != 0
            fp = (stored["det_fp"][mine].astype(np.int64)[None, :] & bits) != 0
            matches.append({"labels": stored["labels"][k].astype(np.int64), "image": stored["det_image"][mine].astype(np.int64), "tp": tp, "fp": fp})
        return LabelMatches(stored["image_ids"], stored["category_ids"], matches, stored["recall_thresholds"], str(stored["labels_sha256"]))
    except (OSError, ValueError, KeyError) as exc:
        raise ConfigError(f"{path}: not an evaluation's per-image matches ({exc})", hint="evaluate again to write it anew") from None


def why_unpaired(a: LabelMatches, b: LabelMatches) -> str | None:
    """Why two evaluations cannot be paired image by image, or None."""
    if a.labels_sha256 != b.labels_sha256 or not np.array_equal(a.image_ids, b.image_ids):
        return f"the two evaluations scored different labelled images ({len(a.image_ids)} and {len(b.image_ids)} images, or other labels)"
    if not np.array_equal(a.category_ids, b.category_ids):
        return "the two evaluations scored different categories (another class map)"
    return None


@dataclass(frozen=True)
class PairedFigure:
    name: str
    a: float
    b: float
    difference: float  # b - a
    interval: tuple[float, float]  # two-sided, at the confidence asked
    draws: np.ndarray  # the bootstrap replicates of b - a

    @property
    def bounded(self) -> bool:
        """Whether any bootstrap draw is finite (none is when no scored image holds a labelled object)."""
        return len(self.draws) > 0

    def upper_bound(self, confidence: float = CONFIDENCE) -> float:
        """The one-sided upper bound of b - a (the largest difference the images allow); NaN without a finite draw."""
        return float(np.quantile(self.draws, confidence)) if self.bounded else float("nan")

    def lower_bound(self, confidence: float = CONFIDENCE) -> float:
        """The one-sided lower bound of b - a; NaN without a finite draw."""
        return float(np.quantile(self.draws, 1 - confidence)) if self.bounded else float("nan")


def paired_difference(
    a: LabelMatches, b: LabelMatches, *, confidence: float = CONFIDENCE, draws: int = DRAWS, seed: int = SEED
) -> dict[str, PairedFigure]:
    """B - A for mAP@[.5:.95] and AP50 over the same images, each draw resampling the images once for both."""
    problem = why_unpaired(a, b)
    if problem is not None:
        raise ConfigError(f"cannot pair the evaluations: {problem}", hint="compare evaluations of the same labels and images")
    images = len(a.image_ids)
    rng = np.random.default_rng(seed)
    rows = []
    for start in range(0, draws, DRAW_CHUNK):
        chunk = min(DRAW_CHUNK, draws - start)
        drawn = block_indices(rng, images, 1, chunk)
        weights = np.stack([np.bincount(row, minlength=images) for row in drawn])
        rows.append(accumulate(b.matches, weights, b.recall_thresholds) - accumulate(a.matches, weights, a.recall_thresholds))
    replicates = np.concatenate(rows)
    point_a, point_b = a.figures(), b.figures()
    out = {}
    for index, name in enumerate(FIGURES):
        values = replicates[:, index][np.isfinite(replicates[:, index])]
        low, high = np.quantile(values, [(1 - confidence) / 2, (1 + confidence) / 2]) if len(values) else (np.nan, np.nan)
        out[name] = PairedFigure(
            name, float(point_a[index]), float(point_b[index]), float(point_b[index] - point_a[index]), (float(low), float(high)), values
        )
    return out


__all__ = ["FIGURES", "MATCHES_FILE", "LabelMatches", "PairedFigure", "from_evaluation", "labels_hash", "paired_difference", "read_matches"]
__all__ += ["CONFIDENCE", "DRAW_CHUNK", "accumulate", "why_unpaired", "write_matches"]
