"""The images the model agrees with least: the most labels missed plus false positives at the operating score (IoU
0.5, COCOeval's matches), each with its labels and detections as report.json lists them and the report draws them."""

from __future__ import annotations

import numpy as np

from tools.evaluate.labelset import LabelledImage
from tools.evaluate.operating import IOU_INDEX, per_image_errors


def worst_images(evaluation, images: list[LabelledImage], names: dict[int, str], score: float, count: int) -> list[dict]:
    """Up to `count` images with at least one error, the most first (ties: the labels' order)."""
    if count <= 0:
        return []
    missed, false = per_image_errors(evaluation, score)
    errors = missed + false
    order = [int(i) for i in np.argsort(-errors, kind="stable")[:count] if errors[i] > 0]
    by_id = {image.id: image for image in images}
    ids = evaluation._paramsEval.imgIds
    out = []
    for rank, index in enumerate(order, start=1):
        image = by_id[ids[index]]
        labels, regions, found = _described(evaluation, index, names, score)
        stem = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in image.name)
        out.append(
            {
                "image": image.name,
                "path": str(image.path),
                "frame": image.frame,
                "missed": int(missed[index]),
                "false_positives": int(false[index]),
                "labels": labels,
                "ignore_regions": regions,
                "detections": found,
                "drawing": f"worst/{rank:02d}-{stem.rsplit('.', 1)[0] if image.frame is None else stem}.jpg",
            }
        )
    return out


def _described(evaluation, index: int, names: dict[int, str], score: float) -> tuple[list[dict], list[list[float]], list[dict]]:
    params = evaluation._paramsEval
    images, areas = len(params.imgIds), len(params.areaRng)
    labels, regions, found = [], [], []
    for k, category in enumerate(params.catIds):
        entry = evaluation.evalImgs[k * areas * images + index]
        if entry is None:
            continue
        scores = dict(zip(entry["dtIds"], entry["dtScores"], strict=True))
        for g, gt_id in enumerate(entry["gtIds"]):
            box = [round(float(v), 2) for v in evaluation.cocoGt.anns[gt_id]["bbox"]]
            if entry["gtIgnore"][g]:
                if box not in regions:
                    regions.append(box)
                continue
            matched = int(entry["gtMatches"][IOU_INDEX, g])
            labels.append({"category": names[category], "bbox": box, "found": bool(matched) and scores[matched] >= score})
        for d, dt_id in enumerate(entry["dtIds"]):
            if entry["dtScores"][d] < score or entry["dtIgnore"][IOU_INDEX, d]:
                continue
            box = [round(float(v), 2) for v in evaluation.cocoDt.anns[dt_id]["bbox"]]
            hit = bool(entry["dtMatches"][IOU_INDEX, d])
            found.append({"category": names[category], "bbox": box, "score": round(float(entry["dtScores"][d]), 4), "hit": hit})
    return labels, regions, found


__all__ = ["worst_images"]
