"""The runtime's own lines in service.log (`sdk logs`): what it serves, how the frames go, its errors, its end.

The runtime writes them to stderr, which its supervisor appends to service.log; each line carries its time and
`[runtime PID]` as the supervisor's carry `[supervisor PID]`. Called from the status thread once per status
interval (never from the frame path): a line when the state changes, when a stage error is new, and every
`every_s` (frames, rate, the recent window's p50 and p99, drops and deadline misses).
"""

from __future__ import annotations

import os
import sys
import time

EVERY_S = 60.0  # a frames line at least this often while frames flow


def _stamp() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()) + f"Z [runtime {os.getpid()}]"


class RuntimeLog:
    def __init__(self, runner, every_s: float = EVERY_S, write=None, clock=time.monotonic) -> None:
        self.runner, self.every_s, self.clock = runner, every_s, clock
        self._write = write or (lambda text: (sys.stderr.write(text), sys.stderr.flush()))
        self._state: str | None = None
        self._error: str | None = None
        self._last: tuple[float, int] | None = None  # (when, frames) of the last frames line

    def say(self, text: str) -> None:
        self._write(f"{_stamp()} {text}\n")

    def started(self, pipeline, release: str) -> None:
        sources = ", ".join(camera.uri for camera in pipeline.spec.cameras.values())
        self.say(f"serving pipeline {pipeline.spec.name}, release {release}, from {sources}")

    def __call__(self, status: dict) -> None:
        state = status.get("state")
        if state != self._state:
            conditions = "; ".join(status.get("conditions") or ())
            self.say(f"state {self._state or 'none'} -> {state}" + (f": {conditions}" if conditions else ""))
            self._state = state
        result = getattr(self.runner, "result", None)
        error = getattr(result, "last_error", None)
        if error and error != self._error:
            stage_errors = dict(result.stage_errors or {})  # a snapshot: the frame loop counts on while this thread reads
            counts = ", ".join(f"{stage} {n}" for stage, n in stage_errors.items())
            self.say(f"error: {error} (stage errors so far: {counts})")
            self._error = error  # only once said: a failed write says it again next time
        now, frames = self.clock(), int(status.get("frames") or 0)
        if self._last is None:
            self._last = (now, frames)
        elif now - self._last[0] >= self.every_s:
            self.say(self._frames_line(status, frames, now))
            self._last = (now, frames)

    def _frames_line(self, status: dict, frames: int, now: float) -> str:
        since, before = self._last
        rate = (frames - before) / max(now - since, 1e-9)
        window = status.get("window") or {}
        recent = f"; p50 {window['p50_ms']} ms, p99 {window['p99_ms']} ms over the last {window['frames']}" if window.get("frames") else ""
        misses = f", deadline misses {status['misses']}" if status.get("deadline_ms") else ""
        return f"frames {frames} ({rate:.1f} fps over {now - since:.0f} s){recent}; dropped {status.get('dropped', 0)}{misses}"

    def ended(self, extra: dict, frames: int) -> None:
        errors = extra.get("stage_errors") or {}
        counts = f"; stage errors: {', '.join(f'{s} {n}' for s, n in errors.items())}" if errors else ""
        last = f"; last error: {extra['last_error']}" if extra.get("last_error") else ""
        self.say(f"ended ({extra.get('state')}): {extra.get('reason')}; {frames} frames{counts}{last}")


__all__ = ["EVERY_S", "RuntimeLog"]
