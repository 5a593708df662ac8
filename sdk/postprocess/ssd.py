"""SSD decoding (TF Object Detection API conventions): anchors + box encodings -> boxes, scores, NMS."""

from __future__ import annotations

import math

import numpy as np

from sdk.errors import ModelError
from sdk.postprocess.detections import Detections
from sdk.preprocess.geometry import ResizeGeometry
from sdk.spec.schema import Postprocess, SsdDecoder
from sdk.stage import Stage


class SsdPostprocessor(Stage):
    name = "postprocess"

    def __init__(self, spec: Postprocess, anchors: np.ndarray, outputs: dict[str, np.ndarray], net_size: tuple[int, int]) -> None:
        decoder = spec.decoder
        assert isinstance(decoder, SsdDecoder)
        self.spec, self.decoder = spec, decoder
        anchors = np.asarray(anchors, np.float32).reshape(-1, 4)
        count = anchors.shape[0]
        for name in (decoder.box_encodings, decoder.class_logits):
            if name not in outputs:
                raise ModelError(f"postprocess.decoder: the model has no output {name!r}; it has {sorted(outputs)}")
        self._encodings = outputs[decoder.box_encodings].reshape(-1, 4)
        if self._encodings.shape[0] != count:
            raise ModelError(
                f"postprocess.decoder.box_encodings: {decoder.box_encodings!r} holds {self._encodings.shape[0]} boxes but there are {count} anchors"
            )
        self._logits = outputs[decoder.class_logits].reshape(count, -1)
        first = 1 if decoder.background_class else 0
        classes = self._logits.shape[1] - first
        if classes != len(spec.classes):
            raise ModelError(
                f"postprocess.classes names {len(spec.classes)} class(es) but {decoder.class_logits!r} "
                f"scores {classes} (background_class: {decoder.background_class})"
            )
        self._first_class = first
        if decoder.anchor_layout == "yxyx":
            y1, x1, y2, x2 = anchors.T
        else:
            x1, y1, x2, y2 = anchors.T
        # Centre form, as TF's FasterRcnnBoxCoder decodes.
        self._anchor_h, self._anchor_w = y2 - y1, x2 - x1
        self._anchor_cy, self._anchor_cx = y1 + 0.5 * self._anchor_h, x1 + 0.5 * self._anchor_w
        self._scale = np.asarray(decoder.scale_factors, np.float32)
        t = spec.score_threshold
        # sigmoid(x) > t  <=>  x > logit(t): threshold before any exp, on 1917 x C logits.
        self._logit_threshold = -math.inf if t <= 0 else math.inf if t >= 1 else math.log(t / (1 - t))
        self._net_w, self._net_h = net_size
        self.detections = Detections(spec.max_detections, spec.classes)

    def __call__(self, geometry: ResizeGeometry) -> Detections:
        out = self.detections
        logits = self._logits
        if self.decoder.score_activation == "sigmoid":
            anchor_idx, class_idx = np.nonzero(logits[:, self._first_class :] > self._logit_threshold)
            scores = 1.0 / (1.0 + np.exp(-logits[anchor_idx, class_idx + self._first_class]))
        else:
            shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
            probs = shifted[:, self._first_class :] / shifted.sum(axis=1, keepdims=True)
            anchor_idx, class_idx = np.nonzero(probs > self.spec.score_threshold)
            scores = probs[anchor_idx, class_idx]
        if len(scores) == 0:
            out.count = 0
            return out
        boxes = self._decode(anchor_idx)
        if self.decoder.clip_boxes:
            np.clip(boxes, 0.0, 1.0, out=boxes)
            nonempty = (boxes[:, 2] > boxes[:, 0]) & (boxes[:, 3] > boxes[:, 1])
            boxes, scores, class_idx = boxes[nonempty], scores[nonempty], class_idx[nonempty]
        # Normalised -> network-input pixels (x1, y1, x2, y2).
        boxes[:, 0::2] *= self._net_w
        boxes[:, 1::2] *= self._net_h
        return out.select(boxes, scores, class_idx, self.spec.iou_threshold, geometry)

    def _decode(self, idx: np.ndarray) -> np.ndarray:
        """Normalised x1, y1, x2, y2 of the given anchors."""
        ty, tx, th, tw = (self._encodings[idx] / self._scale).T
        h = np.exp(th) * self._anchor_h[idx]
        w = np.exp(tw) * self._anchor_w[idx]
        cy = ty * self._anchor_h[idx] + self._anchor_cy[idx]
        cx = tx * self._anchor_w[idx] + self._anchor_cx[idx]
        return np.stack([cx - 0.5 * w, cy - 0.5 * h, cx + 0.5 * w, cy + 0.5 * h], axis=1)
