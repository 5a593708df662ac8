"""Models that end in their own NMS (TF Object Detection API, TensorRT's EfficientNMS, ONNX NonMaxSuppression heads):
their boxes, scores, classes and count are read as they are, mapped to source pixels; the SDK runs no NMS.

Rows past `count` (or, without a count tensor, rows scoring at or below score_threshold, as padding does) are not
detections. Class ids are taken as integers after `class_offset` is subtracted; an id outside postprocess.classes
keeps its number as its label (as for every decoder).
"""

from __future__ import annotations

import numpy as np

from sdk.errors import ModelError
from sdk.geometry import ResizeGeometry
from sdk.postprocess.detections import Detections
from sdk.spec.decoders import NmsInsideDecoder
from sdk.spec.schema import Postprocess
from sdk.stage import Stage


class NmsInsidePostprocessor(Stage):
    name = "postprocess"

    def __init__(self, spec: Postprocess, outputs: dict[str, np.ndarray], net_size: tuple[int, int]) -> None:
        decoder = spec.decoder
        assert isinstance(decoder, NmsInsideDecoder)
        names = {"boxes": decoder.boxes, "scores": decoder.scores, "classes": decoder.classes}
        if decoder.count is not None:
            names["count"] = decoder.count
        for key, name in names.items():
            if name not in outputs:
                raise ModelError(f"postprocess.decoder.{key}: the model has no output {name!r}; it has {sorted(outputs)}")
        boxes = outputs[decoder.boxes]
        if boxes.shape[-1:] != (4,) or boxes.size == 0:
            raise ModelError(f"postprocess.decoder.boxes: {decoder.boxes!r} is {list(boxes.shape)}, expected [1, K, 4]")
        self._boxes = boxes.reshape(-1, 4)
        rows = len(self._boxes)
        self._scores = outputs[decoder.scores].reshape(-1)
        self._classes = outputs[decoder.classes].reshape(-1)
        for key, tensor in (("scores", self._scores), ("classes", self._classes)):
            if len(tensor) != rows:
                raise ModelError(
                    f"postprocess.decoder.{key}: {names[key]!r} holds {len(tensor)} values for {rows} boxes",
                    hint="boxes, scores and classes must be the same K detections of the model's NMS",
                )
        self._count = outputs[decoder.count].reshape(-1) if decoder.count is not None else None
        if self._count is not None and self._count.size != 1:
            raise ModelError(f"postprocess.decoder.count: {decoder.count!r} is {list(outputs[decoder.count].shape)}, expected [1] (batch of one)")
        self.spec, self.decoder = spec, decoder
        width, height = net_size
        # normalised -> network pixels, per coordinate, in the model's order
        self._scale = np.array([height, width, height, width] if decoder.box_format == "yxyx" else [width, height, width, height], np.float32)
        self._work = np.empty((rows, 4), np.float32)
        self.detections = Detections(spec.max_detections, spec.classes)

    def describe(self) -> str:
        return f"nms_inside ({self.decoder.box_format}, {len(self._boxes)} rows): NMS ran inside the model; the SDK's NMS is skipped"

    def __call__(self, geometry: ResizeGeometry) -> Detections:
        rows = len(self._boxes)
        n = rows if self._count is None else max(0, min(rows, int(self._count[0])))
        scores = self._scores[:n]
        keep = np.nonzero(scores > self.spec.score_threshold)[0]
        raw = self._boxes[keep].astype(np.float32)
        if self.decoder.normalized:
            raw *= self._scale
        fmt = self.decoder.box_format
        boxes = self._work[: len(keep)]
        if fmt == "xyxy":
            boxes[:] = raw
        elif fmt == "yxyx":
            boxes[:] = raw[:, [1, 0, 3, 2]]
        else:  # cxcywh
            boxes[:, :2] = raw[:, :2] - 0.5 * raw[:, 2:]
            boxes[:, 2:] = raw[:, :2] + 0.5 * raw[:, 2:]
        class_ids = np.rint(self._classes[keep]).astype(np.int32) - self.decoder.class_offset
        return self.detections.fill(boxes.copy(), scores[keep].astype(np.float32), class_ids, geometry)
