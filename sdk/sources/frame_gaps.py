"""Frames a recording promised that never arrived: holes in its timestamps, and a frame count it did not reach.

FFmpeg's demuxer passes over what it cannot read (a damaged or cut-out stretch, a file that ends
early) without a word to the decoder, so those frames are neither delivered nor corrupt: they just
are not there. Two witnesses tell them, as OpenCV's FFmpeg backend reports them (measured, decision 0114):

- The presentation times (`CAP_PROP_POS_MSEC`, from each frame's pts). A constant-rate stream's
  frames sit one period apart; a jump of n periods is n - 1 frames missing. The period is the
  stream's own (the median of its last `WINDOW` intervals), not the container's frame rate, which
  some containers derive from the average (an MP4 with a hole states a lower rate) or guess.
  (`CAP_PROP_POS_FRAMES` is OpenCV's own count of decoded frames: it never jumps.)
- The frame count the container states (`CAP_PROP_FRAME_COUNT`: AVI's and MP4's headers; Matroska's
  duration times the rate) against the frames that arrived, when the recording ends. A byte range cut
  out of an AVI leaves no hole in its timestamps (the demuxer numbers the packets it finds), only this.

Variable frame rates and live cameras must not look like losses, so:
- a jump counts only when it is an isolated hole in a regular stream: after the first `LEARN`
  intervals (which teach the period), within `REGULAR` of a whole number of periods, and followed
  by `CONFIRM` intervals of one period before more than `MAX_PENDING` other jumps (a rate that
  halves makes every interval a "jump" and is never counted);
- an interval off the grid (not within `REGULAR` of a whole number of periods, or not forwards)
  makes pending jumps void; more than `OFF_GRID` such intervals (at least 3) make the stream
  variable-rate: no jump is counted from then on, and the container's count is not used either;
- the container's count is used only when its rate agrees with the stream's period (within
  `RATE_AGREES`) and the pass saw no change of rate (jumps that were not confirmed as holes): a
  count estimated from a duration and a rate the stream does not keep is no promise;
- live cameras are not asked at all (the reader tracks `file://` sources only).
"""

from __future__ import annotations

import math
from collections import deque

REGULAR = 0.2  # an interval within 20 % of a whole number of periods is on the grid
WINDOW = 31  # the period is the median of the last 31 intervals
LEARN = 5  # ... and no jump is judged before 5 intervals are known
CONFIRM = 8  # a jump counts once 8 intervals of one period follow it
MAX_PENDING = 4  # more jumps than this waiting for confirmation: a change of rate, not lost frames
OFF_GRID = 0.01  # more than 1 % of the intervals off the grid (and at least 3): a variable-rate stream
RATE_AGREES = 0.05  # the container's rate within 5 % of the stream's own period: its frame count is a promise
MAX_COUNT = 1 << 31  # frame counts above this are not counts (OpenCV returns huge or negative numbers for unknown)


class FrameGaps:
    """Counts a recording's missing frames, pass by pass (a replay that loops reads it again: each pass counts)."""

    def __init__(self) -> None:
        self.lost = 0  # every pass, confirmed
        self.last: str | None = None  # the newest loss, in words
        self.start_pass(None, None)

    def start_pass(self, nominal_fps: float | None, promised: float | None) -> None:
        """A new pass over the recording: its container's frame rate and frame count (None or 0: unknown)."""
        self._nominal_ms = 1000.0 / nominal_fps if nominal_fps and 0.1 <= nominal_fps <= 1000 else None
        valid = promised is not None and math.isfinite(promised) and 0 < promised < MAX_COUNT
        self._promised = int(promised) if valid else None
        self._intervals: deque[float] = deque(maxlen=WINDOW)
        self._period = self._nominal_ms
        self._previous: float | None = None
        self._arrived = 0
        self._lost_pass = 0
        self._pending: list[tuple[float, float, int]] = []  # (time before, time after, frames missing)
        self._calm = 0  # intervals of one period since the newest jump
        self._off_grid = 0
        self.variable = False  # this pass: the intervals left the grid, nothing is counted by timestamps
        self._rate_changed = False  # this pass: jumps that were no holes (a change of rate): the container's count is no promise

    def frame(self, t_ms: float | None) -> None:
        """A frame arrived (delivered, dropped or corrupt), presented at `t_ms` (None: not known)."""
        self._arrived += 1
        if t_ms is None or not math.isfinite(t_ms):
            return
        previous, self._previous = self._previous, t_ms
        if previous is None:
            return
        interval = t_ms - previous
        self._intervals.append(interval)
        if self.variable or len(self._intervals) < LEARN:  # the first intervals teach the stream's period
            return
        period = self._period
        if period is None or abs(interval - period) > REGULAR * period:  # not one period: the period asked again
            period = self._period = self._median()
        if period is None or period <= 0:
            return
        periods = interval / period
        whole = round(periods)
        if whole < 1 or abs(periods - whole) > REGULAR:
            self._off_grid += 1
            self._pending.clear()
            self._calm = 0
            if self._off_grid >= 3 and self._off_grid > OFF_GRID * self._arrived:
                self.variable = True
            return
        if whole == 1:
            self._calm += 1
            if self._pending and self._calm >= CONFIRM:
                self._confirm()
            return
        self._pending.append((previous, t_ms, whole - 1))
        self._calm = 0
        if len(self._pending) > MAX_PENDING:
            self._pending.clear()
            self._rate_changed = True

    def end(self) -> None:
        """The recording ended: a jump followed by regular frames to the end counts; then the container's count."""
        if self._pending and self._calm >= 2:
            self._confirm()
        self._rate_changed |= bool(self._pending)
        self._pending.clear()
        if self._promised is None or self.variable or self._rate_changed or self._nominal_ms is None:
            return
        period = self._median() if len(self._intervals) >= LEARN else self._nominal_ms
        if period is None or abs(period - self._nominal_ms) > RATE_AGREES * period:
            return  # the count comes from a rate the stream does not keep
        missing = self._promised - self._arrived - self._lost_pass
        if missing > 0:
            self._count(missing, f"{missing} frame(s) the container counts never arrived (it promises {self._promised}; {self._arrived} arrived)")

    def _confirm(self) -> None:
        for before, after, missing in self._pending:
            self._count(missing, f"{missing} frame(s) missing between {before / 1000:.3f} s and {after / 1000:.3f} s (a hole in the timestamps)")
        self._pending.clear()

    def _count(self, missing: int, words: str) -> None:
        self._lost_pass += missing
        self.lost += missing
        self.last = words

    def _median(self) -> float | None:
        if not self._intervals:
            return None
        ordered = sorted(self._intervals)
        return ordered[len(ordered) // 2]
