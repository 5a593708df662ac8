"""Two runs on the same replay: identical outputs frame by frame, or within the pipeline's tolerance.

The runtime hashes each frame's exact detections (boxes, scores, classes as computed, before
any rounding); equal digests mean bit-identical outputs. Frames whose digests differ are
compared detection by detection (same class, best IoU), so a backend whose arithmetic is not
bit-reproducible (multi-threaded reductions, GPU atomics) can still pass within a stated tolerance.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from sdk.runtime.timeline import TIMELINE_FILE, read_timeline
from sdk.runtime.verdict import FAIL, PASS, BudgetCheck
from sdk.spec.schema import Determinism
from tools.int8.accuracy import match_detections
from tools.reports.detections_file import read_detections


@dataclass(frozen=True)
class DeterminismResult:
    frames_compared: int
    identical_frames: int
    differing_frames: tuple[int, ...]  # frames outside the tolerance
    max_score_diff: float
    min_iou: float
    tolerance: Determinism

    @property
    def passed(self) -> bool:
        return not self.differing_frames

    def as_dict(self) -> dict:
        out = asdict(self)
        out["differing_frames"] = list(self.differing_frames[:50])
        out["passed"] = self.passed
        return out

    def check(self, run: int) -> BudgetCheck:
        detail = f"{self.identical_frames} of {self.frames_compared} frames bit-identical"
        detail += f"; max score diff {self.max_score_diff:.3g}, min IoU {self.min_iou:.4f}"
        if self.differing_frames:
            detail += f"; outside tolerance: frames {list(self.differing_frames[:10])}"
        return BudgetCheck(
            f"determinism.run{run}",
            f"score diff <= {self.tolerance.max_score_diff:g}, IoU >= {self.tolerance.min_iou:g}",
            len(self.differing_frames),
            PASS if self.passed else FAIL,
            self.frames_compared,
            None,
            detail,
        )


def _digests(folder: Path) -> dict[int, int]:
    timeline = read_timeline(folder / TIMELINE_FILE)
    return dict(zip(timeline["frames"].tolist(), timeline["digests"].tolist(), strict=True))


def compare_runs(first: Path, second: Path, tolerance: Determinism) -> DeterminismResult:
    a, b = _digests(first), _digests(second)
    common = sorted(set(a) & set(b))
    different = [frame for frame in common if a[frame] != b[frame]]
    worst_score, worst_iou, outside = 0.0, 1.0, []
    exact = tolerance.max_score_diff == 0 and tolerance.min_iou == 1.0  # no tolerance: any bit that differs fails
    if different:
        da, db = read_detections(first / "detections.jsonl"), read_detections(second / "detections.jsonl")
        for frame in different:
            ref, other = da.get(frame, []), db.get(frame, [])
            pairs = match_detections(ref, other)
            scores = [abs(r - c) for _, r, c in pairs]
            ious = [iou for iou, _, _ in pairs]
            frame_score = max(scores, default=0.0)
            frame_iou = min(ious, default=1.0)
            worst_score, worst_iou = max(worst_score, frame_score), min(worst_iou, frame_iou)
            unmatched = len(pairs) != len(ref) or len(pairs) != len(other)
            if exact or unmatched or frame_score > tolerance.max_score_diff or frame_iou < tolerance.min_iou:
                outside.append(frame)
    return DeterminismResult(
        len(common), len(common) - len(different), tuple(outside), float(np.round(worst_score, 6)), float(np.round(worst_iou, 6)), tolerance
    )
