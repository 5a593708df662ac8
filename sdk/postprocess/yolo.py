"""YOLO decoding: v5 layout [1, N, 5 + C] and v8 layout [1, 4 + C, N], boxes in network pixels."""

from __future__ import annotations

import numpy as np

from sdk.errors import ModelError
from sdk.postprocess.detections import Detections
from sdk.preprocess.geometry import ResizeGeometry
from sdk.spec.schema import Postprocess, YoloDecoder
from sdk.stage import Stage


class YoloPostprocessor(Stage):
    name = "postprocess"

    def __init__(self, spec: Postprocess, outputs: dict[str, np.ndarray]) -> None:
        decoder = spec.decoder
        assert isinstance(decoder, YoloDecoder)
        if decoder.output not in outputs:
            raise ModelError(f"postprocess.decoder.output: the model has no output {decoder.output!r}; it has {sorted(outputs)}")
        raw = outputs[decoder.output]
        if raw.ndim != 3 or raw.shape[0] != 1:
            raise ModelError(f"postprocess.decoder: {decoder.output!r} is {list(raw.shape)}, expected [1, N, 5+C] or [1, 4+C, N]")
        # A view with one row per candidate: [N, 5 + C] (v5) or [N, 4 + C] (v8, transposed view).
        self._rows = raw[0] if decoder.layout == "v5" else raw[0].T
        head = 5 if decoder.layout == "v5" else 4
        classes = self._rows.shape[1] - head
        if classes != len(spec.classes):
            raise ModelError(
                f"postprocess.classes names {len(spec.classes)} class(es) but {decoder.output!r} "
                f"({decoder.layout} layout, shape {list(raw.shape)}) scores {classes}"
            )
        self.spec, self.decoder, self._head = spec, decoder, head
        self.detections = Detections(spec.max_detections, spec.classes)

    def __call__(self, geometry: ResizeGeometry) -> Detections:
        rows, head = self._rows, self._head
        class_scores = rows[:, head:]
        best = class_scores.argmax(axis=1)
        scores = class_scores[np.arange(len(rows)), best]
        if self.decoder.layout == "v5":
            scores = scores * rows[:, 4]  # objectness x class confidence
        keep = np.nonzero(scores > self.spec.score_threshold)[0]
        out = self.detections
        if len(keep) == 0:
            out.count = 0
            return out
        cx, cy, w, h = rows[keep, 0], rows[keep, 1], rows[keep, 2], rows[keep, 3]
        boxes = np.stack([cx - 0.5 * w, cy - 0.5 * h, cx + 0.5 * w, cy + 0.5 * h], axis=1).astype(np.float32)
        scores, best = scores[keep].astype(np.float32), best[keep]
        return out.select(boxes, scores, best, self.spec.iou_threshold, geometry)
