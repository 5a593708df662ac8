"""YOLOX's own COCO evaluation of an ONNX export, written from YOLOX's code in plain numpy, OpenCV and pycocotools: the
independent reference `sdk evaluate` is compared with. Nothing of the SDK is used.

From Megvii-BaseDetection/YOLOX: `yolox/data/data_augment.py` `preproc` (resize by r = min(H / h, W / w) to
(int(w r), int(h r)) with OpenCV's bilinear resize, top-left on grey 114, BGR 0..255), `yolox/utils/boxes.py`
`postprocess` (score = objectness x the best class probability, kept from 0.01, per-class NMS at IoU 0.65 as
torchvision's `batched_nms`: areas without the end pixel, a box suppressed above the threshold),
`yolox/evaluators/coco_evaluator.py` `convert_to_coco_format` (boxes divided by r, not clipped, to [x, y, w, h]; the
category id by name) and pycocotools' COCOeval on the official labels file."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import cv2
import numpy as np

from tests.integration.yolox_reference import _grid, preprocess

SCORE, NMS_IOU = 0.01, 0.65


def _nms(boxes: np.ndarray, scores: np.ndarray) -> list[int]:
    x1, y1, x2, y2 = boxes.T
    areas = (x2 - x1) * (y2 - y1)
    order, keep = scores.argsort(kind="stable")[::-1], []
    while order.size:
        best, rest = order[0], order[1:]
        keep.append(int(best))
        w = np.maximum(0.0, np.minimum(x2[best], x2[rest]) - np.maximum(x1[best], x1[rest]))
        h = np.maximum(0.0, np.minimum(y2[best], y2[rest]) - np.maximum(y1[best], y1[rest]))
        overlap = w * h / (areas[best] + areas[rest] - w * h)
        order = rest[overlap <= NMS_IOU]
    return keep


def detections(session, image: np.ndarray) -> list[tuple[int, float, list[float]]]:
    """(class index, score, [x, y, w, h] in image pixels) as YOLOX's evaluator hands them to COCO."""
    (net,) = session.get_inputs()
    size = tuple(net.shape[2:])
    tensor, r = preprocess(image, size)
    (head,) = session.run(None, {net.name: tensor})
    rows = head[0].astype(np.float32).copy()
    cells, strides = _grid(size)
    rows[:, :2] = (rows[:, :2] + cells) * strides
    rows[:, 2:4] = np.exp(rows[:, 2:4]) * strides
    cx, cy, w, h = rows[:, 0], rows[:, 1], rows[:, 2], rows[:, 3]
    boxes = np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], 1)
    best = rows[:, 5:].argmax(1)
    score = rows[:, 4] * rows[np.arange(len(rows)), 5 + best]
    kept = score >= SCORE
    boxes, score, best = boxes[kept], score[kept], best[kept]
    found = []
    for c in np.unique(best):
        members = np.nonzero(best == c)[0]
        for k in _nms(boxes[members], score[members]):
            x1, y1, x2, y2 = boxes[members[k]] / r
            found.append((int(c), float(score[members[k]]), [float(x1), float(y1), float(x2 - x1), float(y2 - y1)]))
    return found


def coco_map(session, labels: Path, images: Path, class_names: tuple[str, ...]) -> tuple[float, float]:
    """(mAP@[.5:.95], AP50) of the model on the labelled images, as YOLOX's evaluator computes it."""
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    with contextlib.redirect_stdout(io.StringIO()):
        truth = COCO(str(labels))
        by_name = {c["name"]: c["id"] for c in json.loads(labels.read_text())["categories"]}
        results = []
        for entry in truth.dataset["images"]:
            image = cv2.imread(str(images / entry["file_name"]))
            for c, score, box in detections(session, image):
                results.append({"image_id": entry["id"], "category_id": by_name[class_names[c]], "bbox": box, "score": score})
        evaluation = COCOeval(truth, truth.loadRes(results), "bbox")
        evaluation.evaluate()
        evaluation.accumulate()
        evaluation.summarize()
    return float(evaluation.stats[0]), float(evaluation.stats[1])
