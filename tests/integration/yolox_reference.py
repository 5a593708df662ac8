"""YOLOX's published inference, written from its ONNX demo (`demo/ONNXRuntime/onnx_inference.py` with `preproc` and
`demo_postprocess`, Megvii-BaseDetection/YOLOX) in plain numpy and OpenCV: the reference the SDK's YOLOX pipeline is
compared with on a real model (tests/integration/assets/yolox_nano.onnx) and real video.

Preprocessing: resize by r = min(H / h, W / w) to (int(w r), int(h r)) with OpenCV's bilinear resize on 8-bit pixels,
placed in the top-left corner of a canvas of grey 114, BGR, 0..255 floats, no mean or std. Decoding: centre =
(offset + cell) * stride, size = exp(t) * stride over strides 8/16/32; score = objectness x class probability, the best
class per row; candidates above 0.1 through class-agnostic greedy NMS at IoU 0.45 (YOLOX's areas count the end pixel:
(x2 - x1 + 1)(y2 - y1 + 1)); shown from score 0.3. Boxes divided by r, in source pixels (clipped here to the frame, as
the SDK reports them)."""

from __future__ import annotations

import cv2
import numpy as np

SCORE, NMS_IOU, CANDIDATES = 0.3, 0.45, 0.1


def preprocess(image: np.ndarray, size: tuple[int, int]) -> tuple[np.ndarray, float]:
    height, width = size
    r = min(height / image.shape[0], width / image.shape[1])
    content = (int(image.shape[1] * r), int(image.shape[0] * r))
    canvas = np.full((height, width, 3), 114, np.uint8)
    canvas[: content[1], : content[0]] = cv2.resize(image, content, interpolation=cv2.INTER_LINEAR)
    return np.ascontiguousarray(canvas.transpose(2, 0, 1)[None], np.float32), r


def _grid(size: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    cells, strides = [], []
    for stride in (8, 16, 32):
        rows, cols = size[0] // stride, size[1] // stride
        ys, xs = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
        cells.append(np.stack([xs.ravel(), ys.ravel()], 1))
        strides.append(np.full((rows * cols, 1), stride))
    return np.concatenate(cells).astype(np.float32), np.concatenate(strides).astype(np.float32)


def _nms(boxes: np.ndarray, scores: np.ndarray) -> list[int]:
    x1, y1, x2, y2 = boxes.T
    areas = (x2 - x1 + 1) * (y2 - y1 + 1)
    order, keep = scores.argsort()[::-1], []
    while order.size:
        best, rest = order[0], order[1:]
        keep.append(int(best))
        w = np.maximum(0.0, np.minimum(x2[best], x2[rest]) - np.maximum(x1[best], x1[rest]) + 1)
        h = np.maximum(0.0, np.minimum(y2[best], y2[rest]) - np.maximum(y1[best], y1[rest]) + 1)
        overlap = w * h / (areas[best] + areas[rest] - w * h)
        order = rest[overlap <= NMS_IOU]
    return keep


def decode(head: np.ndarray, size: tuple[int, int], r: float, frame_size: tuple[int, int]) -> list[tuple[int, float, list[float]]]:
    """(class id, score, [x1, y1, x2, y2] in frame pixels) for a head [1, cells, 5 + C], best first."""
    rows = head[0].astype(np.float32).copy()
    cells, strides = _grid(size)
    rows[:, :2] = (rows[:, :2] + cells) * strides
    rows[:, 2:4] = np.exp(rows[:, 2:4]) * strides
    cx, cy, w, h = rows[:, 0], rows[:, 1], rows[:, 2], rows[:, 3]
    boxes = np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], 1) / r
    scores = rows[:, 4:5] * rows[:, 5:]
    best = scores.argmax(1)
    score = scores[np.arange(len(rows)), best]
    passed = score > CANDIDATES
    boxes, score, best = boxes[passed], score[passed], best[passed]
    width, height = frame_size
    found = []
    for k in _nms(boxes, score):
        if score[k] > SCORE:
            box = np.clip(boxes[k], 0, [width, height, width, height])
            found.append((int(best[k]), float(score[k]), [float(v) for v in box]))
    return found


def detect(session, image: np.ndarray) -> list[tuple[int, float, list[float]]]:
    """YOLOX's demo on one BGR frame with an ONNX Runtime session of a YOLOX export."""
    (net,) = session.get_inputs()
    size = tuple(net.shape[2:])
    tensor, r = preprocess(image, size)
    (head,) = session.run(None, {net.name: tensor})
    return decode(head, size, r, (image.shape[1], image.shape[0]))


def assert_same(ours: list[tuple[int, float, list[float]]], theirs: list[tuple[int, float, list[float]]], *, px: float, score: float) -> None:
    """The same detections: as many, each with a partner of its class within `px` pixels and `score` (greedy pairing)."""
    assert len(ours) == len(theirs), (ours, theirs)
    left = list(ours)
    for c, s, box in theirs:
        near = [d for d in left if d[0] == c and max(abs(p - q) for p, q in zip(d[2], box, strict=True)) <= px and abs(d[1] - s) <= score]
        assert near, (c, s, box, ours)
        left.remove(near[0])
