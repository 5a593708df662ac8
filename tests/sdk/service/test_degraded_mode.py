"""A stage that stalls: the monitor goes DEGRADED, sheds frames, and comes back NOMINAL when the budget holds."""

from __future__ import annotations

import time

from sdk.runtime import PipelineRunner
from sdk.runtime.health import DEGRADED, NOMINAL, HealthMonitor
from sdk.spec.schema import DegradedMode


def test_stall_degrades_then_recovers(tiny_pipeline, tmp_path, postprocess_hook):
    pipeline, artifacts = tiny_pipeline(frames=90, rate=30)
    states = []
    postprocess_hook(lambda call: time.sleep(0.06 if 10 <= call < 22 else 0.0))  # two frame periods: each of these misses 40 ms
    monitor = HealthMonitor(40, DegradedMode(after_misses=4, recover_after=10, process_every=2))
    runner = PipelineRunner(pipeline, artifacts, tmp_path / "out", monitor=monitor, on_frame=lambda _: states.append(monitor.state))
    result = runner.run()
    assert DEGRADED in states and states[-1] == NOMINAL
    first_degraded = states.index(DEGRADED)
    assert states[:first_degraded] and set(states[:9]) == {NOMINAL}  # before the stall the budget held
    assert monitor.shed > 0 and result.frames + monitor.shed == 90  # every source frame processed or shed, none lost
    assert monitor.transitions >= 3  # STARTING -> NOMINAL -> DEGRADED -> NOMINAL


def test_a_pulled_camera_is_reconnected_with_backoff_and_counted(tiny_pipeline, tmp_path):
    # A live camera at 100 fps whose cable is out for 0.4 s after frame 30.
    uri = "synthetic://boxes?width=64&height=48&frames=100000&live=1&fps=100&unplug_at=30&unplug_ms=400"
    pipeline, artifacts = tiny_pipeline(uri=uri)
    started = time.monotonic()
    result = PipelineRunner(pipeline, artifacts, tmp_path / "out", max_frames=60).run()
    elapsed = time.monotonic() - started
    counters = result.counters
    assert result.frames == 60 and counters.disconnects == 1
    assert counters.reconnect_attempts >= 2  # opening failed while unplugged, then succeeded
    assert elapsed >= 0.4  # the outage really happened, and the run came back from it
    frames = result.recorder.rows()[0]
    assert list(frames) == sorted(frames)  # numbering goes on across the outage
