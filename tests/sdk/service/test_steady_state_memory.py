"""The steady state allocates nothing per frame: traced memory does not grow with the frames processed."""

from __future__ import annotations

import tracemalloc

import numpy as np

from sdk.runtime import PipelineRunner
from sdk.runtime.health import HealthMonitor
from sdk.spec.schema import DegradedMode


def test_no_memory_growth_per_frame_after_warm_up(tiny_pipeline, tmp_path):
    pipeline, artifacts = tiny_pipeline(frames=1300)
    sizes = np.zeros(1301, np.int64)  # allocated before tracing: recording a size allocates nothing

    def on_frame(count: int) -> None:
        sizes[count] = tracemalloc.get_traced_memory()[0]

    tracemalloc.start()
    try:
        monitor = HealthMonitor(1000, DegradedMode())
        PipelineRunner(pipeline, artifacts, tmp_path / "out", on_frame=on_frame, monitor=monitor).run()
    finally:
        tracemalloc.stop()
    # The JSONL sink's text buffer holds up to 8 KiB of lines between flushes: a sawtooth, not growth.
    # Its low points (just after a flush, one in every window of 100 frames) are compared: over
    # 900 frames any per-frame allocation that is kept would show as kilobytes at least.
    growth = int(sizes[1200:1300].min() - sizes[300:400].min())
    assert growth < 2048, f"{growth} bytes kept over 900 frames"
