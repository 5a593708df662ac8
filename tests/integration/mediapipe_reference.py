"""An independent reference for BlazeFace-style SSDs, written from MediaPipe's documented semantics (SsdAnchorsCalculator,
TensorsToDetectionsCalculator) in plain numpy, without the SDK; and `deploy --target local` through the real CLI."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np

REPO = Path(__file__).resolve().parents[2]
SIZE = 128
THRESHOLD, IOU = 0.5, 0.3


def reference_anchors() -> np.ndarray:
    """[896, 4] x_center, y_center, w, h: SsdAnchorsCalculator for face_detection_short_range, written out as loops."""
    strides, min_scale, max_scale = [8, 16, 16, 16], 0.1484375, 0.75
    anchors, layer = [], 0
    while layer < len(strides):
        per_cell, last = 0, layer
        while last < len(strides) and strides[last] == strides[layer]:
            per_cell += 2  # aspect ratio 1.0, plus the interpolated anchor (interpolated_scale_aspect_ratio 1.0 > 0)
            last += 1
        cells = math.ceil(SIZE / strides[layer])
        for y in range(cells):
            for x in range(cells):
                for _ in range(per_cell):
                    anchors.append(((x + 0.5) / cells, (y + 0.5) / cells, 1.0, 1.0))  # fixed_anchor_size: w = h = 1
        layer = last
    del min_scale, max_scale  # fixed_anchor_size: the scales do not reach the anchors
    return np.array(anchors)


def reference_detections(session, bgr: np.ndarray, anchors: np.ndarray, names=("input", "regressors", "classificators")) -> list:
    """(score, [x1, y1, x2, y2], keypoints [6, 2]) in frame pixels, best first."""
    height, width = bgr.shape[:2]
    scale = min(SIZE / width, SIZE / height)
    content_w, content_h = round(width * scale), round(height * scale)
    pad_x, pad_y = (SIZE - content_w) // 2, (SIZE - content_h) // 2
    rgb = cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB).astype(np.float32)
    canvas = np.zeros((SIZE, SIZE, 3), np.float32)  # pad value 0
    canvas[pad_y : pad_y + content_h, pad_x : pad_x + content_w] = cv2.resize(rgb, (content_w, content_h), interpolation=cv2.INTER_LINEAR)
    image, boxes_name, scores_name = names
    raw_boxes, raw_scores = session.run([boxes_name, scores_name], {image: (canvas / 127.5 - 1.0)[None]})
    raw_boxes, raw_scores = raw_boxes[0].astype(np.float64), raw_scores[0, :, 0].astype(np.float64)
    found = []
    for i in range(len(anchors)):
        score = 1.0 / (1.0 + math.exp(-min(max(raw_scores[i], -100.0), 100.0)))  # score_clipping_thresh 100
        if score < THRESHOLD:
            continue
        ax, ay, aw, ah = anchors[i]
        r = raw_boxes[i]
        # reverse_output_order (x first); x_scale = y_scale = w_scale = h_scale = 128; no exponential on the size.
        cx, cy = r[0] / 128 * aw + ax, r[1] / 128 * ah + ay
        w, h = r[2] / 128 * aw, r[3] / 128 * ah
        points = np.array([[r[4 + 2 * k] / 128 * aw + ax, r[5 + 2 * k] / 128 * ah + ay] for k in range(6)])
        found.append((score, np.array([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2]), points))
    found.sort(key=lambda f: -f[0])
    kept = []
    for candidate in found:  # greedy NMS, IoU above 0.3 suppresses
        if all(iou(candidate[1], other[1]) <= IOU for other in kept):
            kept.append(candidate)

    def to_frame(xy: np.ndarray) -> np.ndarray:  # normalised input -> letterbox pixels -> frame pixels
        return np.stack([(xy[..., 0] * SIZE - pad_x) / scale, (xy[..., 1] * SIZE - pad_y) / scale], axis=-1)

    out = []
    for score, box, points in kept:
        corners = to_frame(box.reshape(2, 2)).reshape(4)
        corners[0::2] = np.clip(corners[0::2], 0, width)  # boxes end inside the frame
        corners[1::2] = np.clip(corners[1::2], 0, height)
        out.append((score, corners.tolist(), to_frame(points)))
    return out


def iou(a, b) -> float:
    x1, y1, x2, y2 = max(a[0], b[0]), max(a[1], b[1]), min(a[2], b[2]), min(a[3], b[3])
    inter = max(0.0, x2 - x1) * max(0.0, y2 - y1)
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def deploy_local(pipeline: Path, frames: int, state: Path, reports: Path) -> list[dict]:
    """Run `deploy --target local PIPELINE --frames N` through the real CLI; detections.jsonl's lines."""
    env = {**os.environ, "SDK_STATE_DIR": str(state), "COLUMNS": "200"}
    done = subprocess.run(
        [sys.executable, "-c", "from tools.cli import main; main()", "deploy", "--target", "local", str(pipeline)]
        + ["--frames", str(frames), "--report-dir", str(reports)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    # PASS, FAIL (a measurement of the budgets that `sdk init` writes) or INCONCLUSIVE (too few frames): never an error
    assert done.returncode in (0, 3, 4), done.stdout + done.stderr
    return [json.loads(line) for line in (reports / "detections.jsonl").read_text().splitlines()]


def compare(frames, lines: list[dict], session, anchors: np.ndarray, names=("input", "regressors", "classificators"), band: float = 0.0) -> dict:
    """Match ours to the reference frame by frame (IoU >= 0.5, greedy, best score first). A detection within `band`
    of the threshold on the other side may exist on one side only (a score on the edge). Returns the statistics."""
    stats = {"reference": 0, "ours": 0, "matched": 0, "edge": 0, "score": 0.0, "box": 0.0, "keypoint": 0.0, "counts": set()}
    for bgr, line in zip(frames, lines, strict=True):
        theirs = reference_detections(session, bgr, anchors, names)
        ours = line["detections"]
        stats["counts"].add(len(theirs))
        used: set[int] = set()
        for score, box, points in theirs:
            candidates = [(iou(box, d["box"]), k) for k, d in enumerate(ours) if k not in used]
            best, k = max(candidates, default=(0.0, -1))
            if best < 0.5:
                if score < THRESHOLD + band:
                    stats["edge"] += 1
                else:
                    stats["reference"] += 1  # a miss
                continue
            used.add(k)
            stats["reference"] += 1
            stats["matched"] += 1
            mine = ours[k]
            stats["score"] = max(stats["score"], abs(mine["score"] - score))
            stats["box"] = max(stats["box"], float(np.abs(np.array(mine["box"]) - box).max()))
            stats["keypoint"] = max(stats["keypoint"], float(np.abs(np.array(mine["keypoints"]) - points).max()))
        for k, d in enumerate(ours):
            if k in used:
                continue
            if d["score"] < THRESHOLD + band:
                stats["edge"] += 1
            else:
                stats["ours"] += 1  # an extra one
        stats["ours"] += len(used)
    stats["recall"] = stats["matched"] / max(stats["reference"], 1)
    stats["precision"] = stats["matched"] / max(stats["ours"], 1)
    return stats
