"""Per-class non-maximum suppression (OpenCV's NMSBoxesBatched) with a cap on the total."""

from __future__ import annotations

import numpy as np


def batched_nms(boxes_xyxy: np.ndarray, scores: np.ndarray, class_ids: np.ndarray, iou_threshold: float, max_keep: int) -> np.ndarray:
    """Indices of the kept boxes, highest score first: greedy, per class, IoU > threshold suppresses."""
    import cv2

    if len(scores) == 0:
        return np.zeros(0, np.int64)
    xywh = np.empty((len(boxes_xyxy), 4), np.float64)
    xywh[:, :2] = boxes_xyxy[:, :2]
    xywh[:, 2:] = boxes_xyxy[:, 2:] - boxes_xyxy[:, :2]
    # score_threshold 0: candidates are already thresholded; OpenCV's top_k would cut *before* NMS.
    kept = np.asarray(cv2.dnn.NMSBoxesBatched(xywh, scores.astype(np.float32), class_ids.astype(np.int32), 0.0, iou_threshold), np.int64).reshape(-1)
    order = np.argsort(-scores[kept], kind="stable")
    return kept[order][:max_keep]
