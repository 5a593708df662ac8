"""The `track:` section: multi-object tracking after NMS, one tracker per camera (ByteTrack).

The numbers are ByteTrack's own (Zhang et al., ECCV 2022, `BYTETracker` of ifzhang/ByteTrack), under names
that say what they do: `high_score` is its `track_thresh`, `new_track_score` its `det_thresh`
(track_thresh + 0.1), `match_iou` is 1 - `match_thresh` (0.8: a pair is matched at IoU 0.2 or more),
`low_match_iou` the second association's 0.5, `max_lost_frames` its `track_buffer` (frames of this camera),
`min_hits` the two consecutive detections after which a new track is confirmed and gets its id.
"""


from typing import Literal

from pydantic import model_validator

from sdk.spec.bounds import Frozen, Int, Real, bounds_error, shown

TRACK_HINT = "ByteTrack's defaults need no setting: `track: {kind: bytetrack}`"


class Track(Frozen):
    kind: Literal["bytetrack"] = "bytetrack"
    high_score: Real("first association: detections scoring at least this (ByteTrack's track_thresh)", gt=0, le=1) = 0.5
    low_score: Real("second association: detections scoring at least this and below high_score revive unmatched tracks", ge=0, le=1) = 0.1
    new_track_score: Real("an unmatched high-score detection starts a track at this score or above (ByteTrack's det_thresh)", gt=0, le=1) = 0.6
    match_iou: Real("first association: least IoU of a track's predicted box and a detection (1 - ByteTrack's match_thresh)", gt=0, le=1) = 0.2
    low_match_iou: Real("second association: least IoU with a low-score detection", gt=0, le=1) = 0.5
    max_lost_frames: Int(0, 10_000, "frames a confirmed track stays lost (predicted, no detection) before it ends (ByteTrack's track_buffer)") = 30
    min_hits: Int(1, 100, "consecutive matched frames before a new track is confirmed and gets its id") = 2

    @model_validator(mode="after")
    def _ordered_scores(self) -> "Track":
        if self.low_score > self.high_score:
            raise bounds_error(
                f"{shown(self.low_score)} is above high_score {shown(self.high_score)}; allowed: a number from 0 to {shown(self.high_score)} "
                "(low-score detections are those between low_score and high_score)",
                hint=TRACK_HINT,
                path=("track", "low_score"),
            )
        if self.new_track_score < self.high_score:
            raise bounds_error(
                f"{shown(self.new_track_score)} is below high_score {shown(self.high_score)}; allowed: a number from {shown(self.high_score)} "
                "to 1 (only high-score detections start tracks)",
                hint=TRACK_HINT,
                path=("track", "new_track_score"),
            )
        return self


__all__ = ["TRACK_HINT", "Track"]
