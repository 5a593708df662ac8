"""Detections of one frame: preallocated arrays, filled in place, valid until the next frame."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np


@dataclass
class Detection:
    label: str
    class_id: int
    score: float
    box: tuple[float, float, float, float]  # x1, y1, x2, y2 in source-image pixels


class Detections:
    def __init__(self, capacity: int, labels: tuple[str, ...]) -> None:
        self.labels = labels
        self.boxes = np.zeros((capacity, 4), np.float32)
        self.scores = np.zeros(capacity, np.float32)
        self.class_ids = np.zeros(capacity, np.int32)
        self.count = 0

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Iterator[Detection]:
        for i in range(self.count):
            class_id = int(self.class_ids[i])
            label = self.labels[class_id] if class_id < len(self.labels) else str(class_id)
            x1, y1, x2, y2 = (float(v) for v in self.boxes[i])
            yield Detection(label, class_id, float(self.scores[i]), (x1, y1, x2, y2))
