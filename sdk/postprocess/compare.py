"""Two runs' detections, frame by frame: the share that agree within an IoU and a score tolerance.

Used where two paths must give the same detections up to their known rounding (the CUDA path against
the CPU path: `sdk selftest`, the emulation tests). Lines are those of the JSONL sink
({"frame": i, "detections": [{"label", "score", "box"}]}).
"""

from __future__ import annotations

IOU = 0.98
SCORE = 0.02


def iou(a, b) -> float:
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def matched_share(ours: list[dict], theirs: list[dict], min_iou: float = IOU, max_score_diff: float = SCORE) -> tuple[float, int]:
    """(share of all detections of both runs that have a partner of the same label in the same frame within
    the tolerances, how many detections there were); frames only one run has count as unmatched."""
    by_frame = {line["frame"]: line["detections"] for line in theirs}
    good = total = 0
    seen = set()
    for line in ours:
        seen.add(line["frame"])
        other = list(by_frame.get(line["frame"], []))
        total += len(line["detections"]) + len(other)
        for d in line["detections"]:
            partner = next(
                (
                    o
                    for o in other
                    if o["label"] == d["label"] and iou(d["box"], o["box"]) >= min_iou and abs(d["score"] - o["score"]) <= max_score_diff
                ),
                None,
            )
            if partner is not None:
                other.remove(partner)
                good += 2
    total += sum(len(dets) for frame, dets in by_frame.items() if frame not in seen)
    return (good / total if total else 1.0), total
