"""Health of a running pipeline: NOMINAL or DEGRADED, counters, and latency over a sliding window.

DEGRADED after `after_misses` consecutive deadline misses (AUTOSAR's deadline supervision), NOMINAL
again after `recover_after` consecutive frames within it. While DEGRADED the runtime sheds load:
it processes one frame in `process_every` and counts the others as shed, so a pipeline that
cannot keep up falls back to a lower rate instead of falling ever further behind.
Everything is preallocated: `frame()` runs once per frame and allocates nothing.
"""

from __future__ import annotations

import time

import numpy as np

from sdk.spec.schema import DegradedMode

NOMINAL, DEGRADED, STARTING, STOPPED = "NOMINAL", "DEGRADED", "STARTING", "STOPPED"


class HealthMonitor:
    def __init__(self, deadline_ms: float | None, policy: DegradedMode, window: int = 300, clock=time.monotonic) -> None:
        self.deadline_ns = None if deadline_ms is None else int(deadline_ms * 1e6)
        self.policy = policy
        self.clock = clock
        self.started = clock()
        self.state = STARTING
        self.state_since = self.started
        self.transitions = 0
        self.frames = 0
        self.misses = 0
        self.shed = 0
        self.errors = 0
        self.consecutive_misses = 0
        self.consecutive_hits = 0
        self.last_frame_at: float | None = None
        self._window = np.zeros(window, np.float64)  # end-to-end ms of the newest frames
        self._filled = 0

    def admit(self, frame_index: int) -> bool:
        """Whether to process this frame (DEGRADED sheds all but one in `process_every`)."""
        if self.state == DEGRADED and frame_index % self.policy.process_every:
            self.shed += 1
            return False
        return True

    def frame(self, end_to_end_ns: int) -> None:
        self._window[self.frames % len(self._window)] = end_to_end_ns / 1e6
        self.frames += 1
        self._filled = min(self._filled + 1, len(self._window))
        self.last_frame_at = self.clock()
        if self.state == STARTING:
            self._enter(NOMINAL)
        if self.deadline_ns is None:
            return
        if end_to_end_ns > self.deadline_ns:
            self._miss()
        else:
            self.consecutive_hits += 1
            self.consecutive_misses = 0
            if self.state == DEGRADED and self.consecutive_hits >= self.policy.recover_after:
                self._enter(NOMINAL)

    def failed(self) -> None:
        """A frame a stage could not process: no output in time, so a miss."""
        self.errors += 1
        self._miss()

    def _miss(self) -> None:
        self.misses += 1
        self.consecutive_misses += 1
        self.consecutive_hits = 0
        if self.state in (NOMINAL, STARTING) and self.consecutive_misses >= self.policy.after_misses:
            self._enter(DEGRADED)

    def _enter(self, state: str) -> None:
        if state != self.state:
            self.state = state
            self.state_since = self.clock()
            self.transitions += 1

    def stop(self) -> None:
        self._enter(STOPPED)

    def snapshot(self) -> dict:
        """The status a host or the vehicle reads (a few small allocations: called once per status interval)."""
        window = np.sort(self._window[: self._filled])
        now = self.clock()

        def pick(q: float) -> float | None:
            return round(float(window[max(int(np.ceil(q * len(window))) - 1, 0)]), 3) if len(window) else None

        return {
            "state": self.state,
            "state_for_s": round(now - self.state_since, 3),
            "transitions": self.transitions,
            "uptime_s": round(now - self.started, 3),
            "frames": self.frames,
            "deadline_ms": None if self.deadline_ns is None else self.deadline_ns / 1e6,
            "misses": self.misses,
            "consecutive_misses": self.consecutive_misses,
            "shed": self.shed,
            "errors": self.errors,
            "since_last_frame_s": None if self.last_frame_at is None else round(now - self.last_frame_at, 3),
            "window": {"frames": len(window), "p50_ms": pick(0.5), "p99_ms": pick(0.99), "max_ms": pick(1.0)},
        }
