"""Detections of one frame: preallocated arrays, filled in place, valid until the next frame."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from sdk.geometry import ResizeGeometry
from sdk.postprocess.nms import batched_nms


@dataclass
class Detection:
    label: str
    class_id: int
    score: float
    box: tuple[float, float, float, float]  # x1, y1, x2, y2 in source-image pixels
    keypoints: tuple[tuple[float, float], ...] = ()  # x, y in source-image pixels (not clipped to the frame)
    # With a `track:` stage (sdk/track): the confirmed track's id (None: no confirmed track yet), the track's age in
    # frames and its state (TRACK_STATES). All three are None without tracking.
    track_id: int | None = None
    track_age: int | None = None
    track_state: str | None = None
    secondary: dict | None = None  # the cascade steps' results on this detection's crop, by step name


# A detection's track: matched to a confirmed track; the first hits of a track not yet confirmed (no id yet);
# no track (a low-score detection matching none, or a high-score one below new_track_score).
TRACK_STATES = ("tracked", "tentative", "untracked")


class Detections:
    def __init__(self, capacity: int, labels: tuple[str, ...], *, keypoints: int = 0, class_agnostic: bool = False) -> None:
        self.labels = labels
        self.class_agnostic = class_agnostic  # NMS across classes (postprocess.nms: class_agnostic), else per class
        self.boxes = np.zeros((capacity, 4), np.float32)
        self.keypoints = np.zeros((capacity, keypoints, 2), np.float32)  # x, y per keypoint; none unless the decoder has them
        self.scores = np.zeros(capacity, np.float32)
        self.class_ids = np.zeros(capacity, np.int32)
        self.count = 0
        # Written by a tracker (sdk/track) after NMS; `tracked` stays False without one (and nothing of it is serialised).
        self.tracked = False
        self.track_ids = np.full(capacity, -1, np.int64)  # -1: no confirmed track
        self.track_ages = np.zeros(capacity, np.int32)  # frames since the track began (1 on its first); 0: no track
        self.track_states = np.zeros(capacity, np.int8)  # index into TRACK_STATES
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
        groups = np.zeros_like(class_ids) if self.class_agnostic else class_ids
        kept = batched_nms(boxes, scores, groups, iou_threshold, len(self.scores))
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

    def fill(self, boxes: np.ndarray, scores: np.ndarray, class_ids: np.ndarray, geometry: ResizeGeometry) -> Detections:
        """Keep these detections as they are (a model that ran its own NMS): best first, capped, in source pixels."""
        order = np.argsort(-scores, kind="stable")[: len(self.scores)]
        n = len(order)
        self.boxes[:n] = boxes[order]
        self.scores[:n] = scores[order]
        self.class_ids[:n] = class_ids[order]
        self.count = n
        geometry.boxes_to_source(self.boxes[:n])
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
        if self.tracked:  # the track ids are output too; without a tracker the digest is as before
            h.update(self.track_ids[:n].data)
            h.update(self.track_states[:n].data)
        return int.from_bytes(h.digest(), "little")

    def __iter__(self) -> Iterator[Detection]:
        for i in range(self.count):
            class_id = int(self.class_ids[i])
            label = self.labels[class_id] if 0 <= class_id < len(self.labels) else str(class_id)
            x1, y1, x2, y2 = (float(v) for v in self.boxes[i])
            points = tuple((float(x), float(y)) for x, y in self.keypoints[i])
            extra = self.secondary[i] if self.secondary is not None and i < len(self.secondary) and self.secondary[i] else None
            if not self.tracked:
                yield Detection(label, class_id, float(self.scores[i]), (x1, y1, x2, y2), points, secondary=extra)
                continue
            track_id = int(self.track_ids[i])
            yield Detection(
                label,
                class_id,
                float(self.scores[i]),
                (x1, y1, x2, y2),
                points,
                track_id if track_id >= 0 else None,
                int(self.track_ages[i]),
                TRACK_STATES[self.track_states[i]],
                extra,
            )
