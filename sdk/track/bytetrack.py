"""ByteTrack (Zhang et al., ECCV 2022): every detection box associated, the low-score ones too.

Per frame, after NMS:

1. every track's box is predicted one frame ahead (sdk.track.kalman, constant velocity);
2. detections scoring `high_score` or more are matched to all tracks: IoU of predicted and detected boxes,
   optimal assignment (scipy's `linear_sum_assignment`), pairs below `match_iou` never matched;
3. the tracks left over are matched to the low-score detections (`low_score` <= score < `high_score`) at
   `low_match_iou`: an occluded person's weak box keeps its track instead of starting a new one;
4. a high-score detection matching nothing starts a tentative track if it scores `new_track_score` or more;
   `min_hits` consecutive matches confirm it and give it the next id. A tentative track that misses a frame
   ends; a confirmed one is lost, predicted, and ends after `max_lost_frames` frames without a match.

The detections are annotated in place (their order is NMS's): `track_ids` (-1 until confirmed),
`track_ages` (frames since the track began) and `track_states` (Detections' TRACK_STATES).
One tracker follows one camera. scipy is imported when the first tracker is made, not before.
"""

from __future__ import annotations

from types import TracebackType

import numpy as np

from sdk.postprocess.detections import TRACK_STATES, Detections
from sdk.spec.track import Track
from sdk.track.kalman import BoxKalman

TRACKED, TENTATIVE, UNTRACKED = (TRACK_STATES.index(s) for s in ("tracked", "tentative", "untracked"))


def iou_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of every box of a [N, 4] with every box of b [M, 4] (x1, y1, x2, y2), [N, M]."""
    left = np.maximum(a[:, None, 0], b[None, :, 0])
    top = np.maximum(a[:, None, 1], b[None, :, 1])
    right = np.minimum(a[:, None, 2], b[None, :, 2])
    bottom = np.minimum(a[:, None, 3], b[None, :, 3])
    inter = np.clip(right - left, 0, None) * np.clip(bottom - top, 0, None)
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    union = area_a[:, None] + area_b[None, :] - inter
    return np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)


class ByteTracker:
    """Settings in the constructor; `update(detections)` once per frame of its camera, in frame order."""

    name = "track"

    def __init__(self, spec: Track, *, gated: bool = True) -> None:
        from scipy.optimize import linear_sum_assignment  # the device needs scipy only where a pipeline tracks

        self.spec = spec
        # gated (ByteTrack's own lap.lapjv(cost_limit=...)): a pair under the IoU threshold cannot take part in the
        # assignment. False: assign on the raw IoU, then drop the pairs under it, as the `trackers` package does
        # (kept for the comparison with it, docs/decisions/0621-bytetrack-written-here.md).
        self.gated = gated
        self._assign = linear_sum_assignment
        self.kalman = BoxKalman()
        self.ids = np.zeros(0, np.int64)  # -1 until confirmed
        self.hits = np.zeros(0, np.int32)  # consecutive frames matched
        self.ages = np.zeros(0, np.int32)  # frames since the track began
        self.missed = np.zeros(0, np.int32)  # frames since the last match
        self.next_id = 1
        self.frames = 0

    def __enter__(self) -> ByteTracker:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, trace: TracebackType | None) -> None:
        self.reset()

    def reset(self) -> None:
        """Forget every track (a new scene: the camera reconnected after a long gap); ids keep counting up."""
        self.kalman = BoxKalman()
        self.ids, self.hits, self.ages, self.missed = self.ids[:0], self.hits[:0], self.ages[:0], self.missed[:0]

    @property
    def confirmed(self) -> int:
        return int(np.count_nonzero(self.ids >= 0))

    @property
    def lost(self) -> int:
        """Confirmed tracks without a detection this frame (predicted, waiting for one)."""
        return int(np.count_nonzero((self.ids >= 0) & (self.missed > 0)))

    def _match(self, iou: np.ndarray, tracks: np.ndarray, dets: np.ndarray, least_iou: float) -> tuple[np.ndarray, np.ndarray]:
        """Optimal assignment of these track rows to these detection rows (of the frame's IoU matrix); pairs under
        `least_iou` are never assigned. Returns the matched track rows and detection rows."""
        if not len(tracks) or not len(dets):
            return tracks[:0], dets[:0]
        pairs = iou[np.ix_(tracks, dets)]
        if self.gated:
            pairs[pairs < least_iou] = 0.0  # a pair below the threshold adds nothing to the assignment's total
        rows, cols = self._assign(pairs, maximize=True)
        good = pairs[rows, cols] >= least_iou
        return tracks[rows[good]], dets[cols[good]]

    def update(self, detections: Detections) -> Detections:
        spec = self.spec
        n = detections.count
        boxes = detections.boxes[:n].astype(np.float64)
        scores = detections.scores[:n]
        self.frames += 1
        # 1. Predict: a track matched last frame keeps its run of hits, one that missed starts a new run.
        self.kalman.predict()
        self.hits[self.missed > 0] = 0
        self.missed += 1
        self.ages += 1
        det_track = np.full(n, -1, np.intp)  # the track row each detection joined
        high = np.flatnonzero(scores >= spec.high_score)
        low = np.flatnonzero((scores >= spec.low_score) & (scores < spec.high_score))
        iou = iou_matrix(self.kalman.boxes, boxes) if len(self.ids) and n else None  # predicted tracks x detections
        # 2. High-score detections against every track.
        rows, dets = self._match(iou, np.arange(len(self.ids)), high, spec.match_iou)
        det_track[dets] = rows
        matched = np.zeros(len(self.ids), bool)
        matched[rows] = True
        # 3. Low-score detections against the tracks left over.
        rows, dets = self._match(iou, np.flatnonzero(~matched), low, spec.low_match_iou)
        det_track[dets] = rows
        joined = np.flatnonzero(det_track >= 0)
        rows = det_track[joined]
        self.kalman.update(rows, boxes[joined])
        self.missed[rows] = 0
        self.hits[rows] += 1
        # 4. New tentative tracks from the unmatched high-score detections.
        born = high[(det_track[high] < 0) & (scores[high] >= spec.new_track_score)]
        if len(born):
            first = len(self.ids)
            self.kalman.add(boxes[born])
            self.ids = np.concatenate([self.ids, np.full(len(born), -1, np.int64)])
            self.hits = np.concatenate([self.hits, np.ones(len(born), np.int32)])
            self.ages = np.concatenate([self.ages, np.ones(len(born), np.int32)])
            self.missed = np.concatenate([self.missed, np.zeros(len(born), np.int32)])
            det_track[born] = np.arange(first, first + len(born))
        # Confirm: ids in detection order (best score first), so numbering is deterministic.
        rows = det_track[det_track >= 0]
        confirmed = rows[(self.ids[rows] < 0) & (self.hits[rows] >= spec.min_hits)]
        if len(confirmed):
            self.ids[confirmed] = np.arange(self.next_id, self.next_id + len(confirmed))
            self.next_id += len(confirmed)
        self._write(detections, det_track)
        # 5. End the tentative tracks that missed and the confirmed ones lost too long.
        alive = (self.missed <= spec.max_lost_frames) & ((self.ids >= 0) | (self.missed == 0))
        if not alive.all():
            self._keep(alive)
        return detections

    def _write(self, detections: Detections, det_track: np.ndarray) -> None:
        n = len(det_track)
        has = det_track >= 0
        rows = det_track[has]
        ids = self.ids[rows]
        detections.track_ids[:n] = -1
        detections.track_ids[:n][has] = ids
        detections.track_ages[:n] = 0
        detections.track_ages[:n][has] = self.ages[rows]
        detections.track_states[:n] = UNTRACKED
        detections.track_states[:n][has] = np.where(ids >= 0, TRACKED, TENTATIVE)
        detections.tracked = True

    def _keep(self, alive: np.ndarray) -> None:
        self.kalman.keep(alive)
        self.ids, self.hits, self.ages, self.missed = self.ids[alive], self.hits[alive], self.ages[alive], self.missed[alive]

    def describe(self) -> str:
        s = self.spec
        return (
            f"ByteTrack (high {s.high_score:g}, low {s.low_score:g}, new {s.new_track_score:g}, IoU {s.match_iou:g}/{s.low_match_iou:g}, "
            f"lost {s.max_lost_frames} frames, {s.min_hits} hits)"
        )
