"""timeline.npz: every measured frame's timestamps and output digest, for plots and run-to-run comparison.

report.json holds the statistics; the timeline holds the raw data they came from, so the host
can draw the latency timeline and CDFs and compare two runs frame by frame without trusting
a summary. Written atomically beside report.json.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from sdk.runtime.recorder import STAGES, LatencyRecorder
from sdk.sinks.files import partial_path, publish

TIMELINE_FILE = "timeline.npz"


def write_timeline(recorder: LatencyRecorder, warmup: int, folder: Path) -> Path:
    frames, times, digests = recorder.rows()
    final = Path(folder) / TIMELINE_FILE
    partial = partial_path(final)
    with partial.open("wb") as handle:  # a file object: np.savez would otherwise append ".npz" to the name
        np.savez(handle, frames=frames, times_ns=times, digests=digests, warmup=np.int64(warmup), stages=np.array(STAGES))
    publish(partial, final)
    return final


def read_timeline(path: Path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as data:
        return {key: data[key] for key in data.files}
