"""The steady state allocates nothing per frame: traced memory does not grow with the frames processed."""

from __future__ import annotations

import tracemalloc

from sdk.runtime import PipelineRunner
from sdk.service.health import HealthMonitor
from sdk.spec.schema import DegradedMode


def test_no_memory_growth_per_frame_after_warm_up(tiny_pipeline, tmp_path):
    pipeline, artifacts = tiny_pipeline(frames=1300)
    sizes = {}

    def on_frame(count: int) -> None:
        if count in (300, 1300):
            sizes[count] = tracemalloc.get_traced_memory()[0]

    tracemalloc.start()
    try:
        monitor = HealthMonitor(1000, DegradedMode())
        PipelineRunner(pipeline, artifacts, tmp_path / "out", on_frame=on_frame, monitor=monitor).run()
    finally:
        tracemalloc.stop()
    growth = sizes[1300] - sizes[300]
    # 1000 frames: any per-frame allocation that is kept would show as kilobytes at least.
    assert growth < 2048, f"{growth} bytes kept over 1000 frames"
