"""Detections of one frame: preallocated arrays, filled in place, valid until the next frame."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from sdk.postprocess.nms import batched_nms
from sdk.preprocess.geometry import ResizeGeometry


@dataclass
class Detection:
    label: str
    class_id: int
    score: float
    box: tuple[float, float, float, float]  # x1, y1, x2, y2 in source-image pixels
    keypoints: tuple[tuple[float, float], ...] = ()  # x, y in source-image pixels (not clipped to the frame)
    secondary: dict | None = None  # the cascade steps' results on this detection's crop, by step name


class Detections:
    def __init__(self, capacity: int, labels: tuple[str, ...], *, keypoints: int = 0) -> None:
        self.labels = labels
        self.boxes = np.zeros((capacity, 4), np.float32)
        self.keypoints = np.zeros((capacity, keypoints, 2), np.float32)  # x, y per keypoint; none unless the decoder has them
        self.scores = np.zeros(capacity, np.float32)
        self.class_ids = np.zeros(capacity, np.int32)
        self.count = 0
        self.secondary: list[dict] | None = None  # set by the cascade stage each frame, one mapping per detection

    def select(
        self,
        boxes: np.ndarray,
        scores: np.ndarray,
        class_ids: np.ndarray,
        iou_threshold: float,
        geometry: ResizeGeometry,
        keypoints: np.ndarray | None = None,
    ) -> Detections:
        """Keep the NMS survivors of these candidates (network pixels; keypoints [K, P, 2] x, y), best first, in source pixels."""
        kept = batched_nms(boxes, scores, class_ids, iou_threshold, len(self.scores))
        n = len(kept)
        self.boxes[:n] = boxes[kept]
        self.scores[:n] = scores[kept]
        self.class_ids[:n] = class_ids[kept]
        self.count = n
        geometry.boxes_to_source(self.boxes[:n])
        if keypoints is not None and self.keypoints.shape[1]:
            self.keypoints[:n] = keypoints[kept]
            geometry.points_to_source(self.keypoints[:n].reshape(-1, 2))
        return self

    def __len__(self) -> int:
        return self.count

    def digest(self) -> int:
        """64-bit hash of this frame's exact output (boxes, scores, classes): two runs compare frame by frame."""
        n = self.count
        h = hashlib.blake2b(self.boxes[:n].data, digest_size=8)
        h.update(self.scores[:n].data)
        h.update(self.class_ids[:n].data)
        h.update(self.keypoints[:n].data)  # nothing when the decoder has no keypoints: the digest is as before
        return int.from_bytes(h.digest(), "little")

    def __iter__(self) -> Iterator[Detection]:
        for i in range(self.count):
            class_id = int(self.class_ids[i])
            label = self.labels[class_id] if class_id < len(self.labels) else str(class_id)
            x1, y1, x2, y2 = (float(v) for v in self.boxes[i])
            points = tuple((float(x), float(y)) for x, y in self.keypoints[i])
            extra = self.secondary[i] if self.secondary is not None and i < len(self.secondary) and self.secondary[i] else None
            yield Detection(label, class_id, float(self.scores[i]), (x1, y1, x2, y2), points, extra)
