"""A run's per-frame samples, for comparisons over frames rather than over summaries.

From a report folder: every measured frame's stage and end-to-end latency (timeline.npz, warm-up excluded), its
deadline misses (dropped frames count as misses, as in report.json), and, where the run was judged for accuracy,
each frame's detections against the FP32 reference (detections.jsonl and reference_detections.jsonl), and where it
was scored on labels, each image's matches (label_matches.npz, tools/history/label_matches.py). A run whose
folder is gone keeps only its report's figures: it can be shown, not tested.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sdk.runtime.recorder import latencies_from_times
from sdk.runtime.statistics import deadline_misses
from sdk.runtime.timeline import TIMELINE_FILE, read_timeline

REPORT_FILE = "report.json"
DETECTIONS_FILE = "detections.jsonl"
REFERENCE_FILE = "reference_detections.jsonl"
SERIES = ("preprocess", "infer", "postprocess", "sink", "end_to_end")
ACCURACY_COLUMNS = ("reference", "run", "matched", "iou_sum", "drift_sum")


@dataclass
class RunSamples:
    """What one run measured: `latencies` (series -> ms per measured frame), `frames` (their source frame numbers),
    `accuracy` (frames x ACCURACY_COLUMNS, or None), the report, and where it came from (`label`)."""

    label: str
    report: dict
    folder: Path | None
    latencies: dict[str, np.ndarray]
    frames: np.ndarray | None
    accuracy: np.ndarray | None
    labels: object | None = None  # an evaluation on labels: its per-image matches (tools/history/label_matches.py: LabelMatches)

    @property
    def has_frames(self) -> bool:
        return bool(self.latencies)

    def miss_flags(self, deadline_ms: float) -> np.ndarray | None:
        if self.frames is None or "end_to_end" not in self.latencies:
            return None
        return deadline_misses(self.frames, self.latencies["end_to_end"], deadline_ms).miss_flags.astype(np.float64)


def load_run(folder: Path, label: str | None = None, report: dict | None = None) -> RunSamples:
    """A run from its report folder; `report` stands in for report.json when the folder is gone."""
    folder = Path(folder)
    if report is None or (folder / REPORT_FILE).is_file():
        report = json.loads((folder / REPORT_FILE).read_text())
    latencies: dict[str, np.ndarray] = {}
    frames = None
    if (folder / TIMELINE_FILE).is_file():
        timeline = read_timeline(folder / TIMELINE_FILE)
        warmup = int(timeline["warmup"])
        measured = latencies_from_times(timeline["times_ns"][warmup:], tuple(timeline["stages"].tolist()))
        latencies = {name: np.asarray(measured[name], np.float64) for name in SERIES if name in measured}
        frames = np.asarray(timeline["frames"][warmup:])
    return RunSamples(label or str(folder), report, folder if folder.is_dir() else None, latencies, frames, _accuracy(folder), _labels(folder))


def _labels(folder: Path):
    """The run's evaluation on labels (label_matches.npz), where it was judged on labels."""
    from tools.history.label_matches import MATCHES_FILE, read_matches

    return read_matches(folder / MATCHES_FILE) if (folder / MATCHES_FILE).is_file() else None


def _accuracy(folder: Path) -> np.ndarray | None:
    """Per frame the run was judged on: reference detections, run detections, matched pairs, their IoU and score-drift sums."""
    if not ((folder / REFERENCE_FILE).is_file() and (folder / DETECTIONS_FILE).is_file()):
        return None
    from tools.int8.accuracy import match_detections
    from tools.reports.detections_file import read_detections

    reference, run = read_detections(folder / REFERENCE_FILE), read_detections(folder / DETECTIONS_FILE)
    rows = []
    for frame in sorted(set(reference) & set(run), key=str):
        pairs = match_detections(reference[frame], run[frame])
        rows.append((len(reference[frame]), len(run[frame]), len(pairs), sum(p[0] for p in pairs), sum(abs(p[1] - p[2]) for p in pairs)))
    return np.asarray(rows, np.float64).reshape(-1, len(ACCURACY_COLUMNS)) if rows else None


def accuracy_figures(totals) -> dict[str, np.ndarray]:
    """recall, precision, mean IoU and mean score drift from column sums, as tools/evidence/reference.py computes
    them (`totals`: the five sums, each a number or an array of bootstrap replicates)."""
    reference, run, matched, iou, drift = (np.asarray(t, np.float64) for t in totals)

    def ratio(numerator, denominator, empty: float) -> np.ndarray:
        return np.where(denominator > 0, numerator / np.where(denominator > 0, denominator, 1.0), empty)

    return {
        "recall": ratio(matched, reference, 1.0),
        "precision": ratio(matched, run, 1.0),
        "mean_iou": ratio(iou, matched, 1.0),
        "mean_score_drift": ratio(drift, matched, 0.0),
    }
