"""YOLO decoding, boxes in network pixels: v5 [1, N, 5 + C] and v8 [1, 4 + C, N] decoded by the graph; YOLOX and
anchor-based v5 raw heads decoded here, on grids laid from the network input size and the strides.

- YOLOX (its ONNX export, `decode_in_inference` off): a row is (x, y offsets in cells, log w, log h, objectness,
  class scores), objectness and classes already through the sigmoid; centre = (offset + cell) * stride, size =
  exp(t) * stride, score = objectness x class score.
- v5 with `anchors` (a raw Detect head, as exported for accelerators that decode on the CPU): a row is logits;
  after the sigmoid, centre = (2 s - 0.5 + cell) * stride, size = (2 s)^2 * anchor, score = objectness x class.
Rows follow the strides in order, and within one: anchor (v5), grid row, grid column (YOLOv5's and YOLOX's order).
A row's best class is its class (as for v5 and v8); the SDK's NMS runs per class.
"""

from __future__ import annotations

import math

import numpy as np

from sdk.errors import ModelError
from sdk.geometry import ResizeGeometry
from sdk.postprocess.detections import Detections
from sdk.spec.decoders import YoloDecoder
from sdk.spec.schema import Postprocess
from sdk.stage import Stage


def _logit(p: float) -> float:
    return -math.inf if p <= 0 else math.inf if p >= 1 else math.log(p / (1 - p))


class YoloPostprocessor(Stage):
    name = "postprocess"

    def __init__(self, spec: Postprocess, outputs: dict[str, np.ndarray], net_size: tuple[int, int] = (0, 0)) -> None:
        decoder = spec.decoder
        assert isinstance(decoder, YoloDecoder)
        if decoder.output not in outputs:
            raise ModelError(f"postprocess.decoder.output: the model has no output {decoder.output!r}; it has {sorted(outputs)}")
        raw = outputs[decoder.output]
        if raw.ndim != 3 or raw.shape[0] != 1:
            raise ModelError(f"postprocess.decoder: {decoder.output!r} is {list(raw.shape)}, expected [1, N, 5+C] or [1, 4+C, N]")
        # A view with one row per candidate: [N, 5 + C] (v5, yolox) or [N, 4 + C] (v8, transposed view).
        self._rows = raw[0].T if decoder.layout == "v8" else raw[0]
        self._columns = raw[0] if decoder.layout == "v8" else None  # [4 + C, N]: v8's class maxima along contiguous rows
        head = 4 if decoder.layout == "v8" else 5
        classes = self._rows.shape[1] - head
        if classes != len(spec.classes):
            raise ModelError(
                f"postprocess.classes names {len(spec.classes)} class(es) but {decoder.output!r} "
                f"({decoder.layout} layout, shape {list(raw.shape)}) scores {classes}"
            )
        self.spec, self.decoder, self._head = spec, decoder, head
        self._grid = decoder.layout == "yolox" or decoder.anchors is not None
        if self._grid:
            self._cell_x, self._cell_y, self._stride, self._anchor_w, self._anchor_h = _grids(decoder, net_size)
            if len(self._cell_x) != len(self._rows):
                width, height = net_size
                raise ModelError(
                    f"postprocess.decoder: {decoder.output!r} has {len(self._rows)} rows but strides {list(decoder.grid_strides())} on "
                    f"{width}x{height} make {len(self._cell_x)} cells" + (" x anchors" if decoder.anchors is not None else ""),
                    hint="the strides (or anchors) and preprocess.resize must be those the model was exported with",
                )
        self._objectness_logit = _logit(spec.score_threshold)
        self.detections = Detections(spec.max_detections, spec.classes, class_agnostic=spec.class_agnostic)

    def describe(self) -> str:
        what = "YOLOv5 raw head with anchors" if self.decoder.anchors is not None else f"YOLO {self.decoder.layout}"
        return f"{what}, {len(self._rows)} candidates; the SDK's NMS (IoU {self.spec.iou_threshold:g})"

    def __call__(self, geometry: ResizeGeometry) -> Detections:
        if self._grid:
            return self._decode_grid(geometry)
        rows, head, out = self._rows, self._head, self.detections
        if self._columns is not None:
            # v8: the best score per candidate reduced over contiguous class rows (not the transposed view's
            # strided ones); the best class only for those that pass (same argmax: the first maximum).
            classes = self._columns[4:]
            scores = classes.max(axis=0)
            keep = np.nonzero(scores > self.spec.score_threshold)[0]
            best = classes[:, keep].argmax(axis=0)
            scores = scores[keep]
        else:
            class_scores = rows[:, head:]
            best = class_scores.argmax(axis=1)
            scores = class_scores[np.arange(len(rows)), best] * rows[:, 4]  # v5: objectness x class confidence
            keep = np.nonzero(scores > self.spec.score_threshold)[0]
            best, scores = best[keep], scores[keep]
        if len(keep) == 0:
            out.count = 0
            return out
        cx, cy, w, h = rows[keep, 0], rows[keep, 1], rows[keep, 2], rows[keep, 3]
        boxes = np.stack([cx - 0.5 * w, cy - 0.5 * h, cx + 0.5 * w, cy + 0.5 * h], axis=1).astype(np.float32)
        scores = scores.astype(np.float32)
        return out.select(boxes, scores, best, self.spec.iou_threshold, geometry)

    def _decode_grid(self, geometry: ResizeGeometry) -> Detections:
        rows, out, threshold = self._rows, self.detections, self.spec.score_threshold
        anchored = self.decoder.anchors is not None
        # score = objectness x class <= objectness: rows whose objectness cannot pass are never looked at again.
        keep = np.nonzero(rows[:, 4] > (self._objectness_logit if anchored else threshold))[0]
        if len(keep):
            part = rows[keep].astype(np.float32)
            if anchored:
                part = 1.0 / (1.0 + np.exp(-part))
            best = part[:, 5:].argmax(axis=1)
            scores = part[np.arange(len(part)), 5 + best] * part[:, 4]
            passed = scores > threshold
            keep, part, best, scores = keep[passed], part[passed], best[passed], scores[passed]
        if len(keep) == 0:
            out.count = 0
            return out
        stride = self._stride[keep]
        if anchored:
            cx = (part[:, 0] * 2.0 - 0.5 + self._cell_x[keep]) * stride
            cy = (part[:, 1] * 2.0 - 0.5 + self._cell_y[keep]) * stride
            w = (part[:, 2] * 2.0) ** 2 * self._anchor_w[keep]
            h = (part[:, 3] * 2.0) ** 2 * self._anchor_h[keep]
        else:
            cx = (part[:, 0] + self._cell_x[keep]) * stride
            cy = (part[:, 1] + self._cell_y[keep]) * stride
            w = np.exp(part[:, 2]) * stride
            h = np.exp(part[:, 3]) * stride
        boxes = np.stack([cx - 0.5 * w, cy - 0.5 * h, cx + 0.5 * w, cy + 0.5 * h], axis=1).astype(np.float32)
        return out.select(boxes, scores.astype(np.float32), best, self.spec.iou_threshold, geometry)


def _grids(decoder: YoloDecoder, net_size: tuple[int, int]) -> tuple[np.ndarray, ...]:
    """Per output row: cell x, cell y, stride, anchor w, anchor h (float32), in the head's row order."""
    width, height = net_size
    parts: list[np.ndarray] = []
    for stride in decoder.grid_strides():
        rows, cols = math.ceil(height / stride), math.ceil(width / stride)
        sizes = decoder.anchors[stride] if decoder.anchors is not None else ((0.0, 0.0),)
        ys, xs = np.meshgrid(np.arange(rows, dtype=np.float32), np.arange(cols, dtype=np.float32), indexing="ij")
        for anchor_w, anchor_h in sizes:
            block = np.empty((rows * cols, 5), np.float32)
            block[:, 0], block[:, 1], block[:, 2], block[:, 3], block[:, 4] = xs.ravel(), ys.ravel(), stride, anchor_w, anchor_h
            parts.append(block)
    table = np.concatenate(parts)
    return tuple(np.ascontiguousarray(table[:, i]) for i in range(5))
