"""Frames with index and capture time, from any reader, under the pipeline's replay rules.

Recorded sources are pulled: with `rate_fps` each frame is due at `t0 + index / rate` and
carries that due time as its capture time, so a slow stage shows up as latency of the
frames behind it (no coordinated omission), never as silently fewer frames. With `pace: recorded`
(recordings whose frames carry stamps: mcap://, rosbag2://) a frame is due at `t0 + (stamp - first stamp)`
instead (never before the frame before it: a stamp that goes backwards is due at once, and counted by the
reader). Every frame of such a recording carries its recorded stamp and frame id. Live cameras
push: a capture thread stamps each frame on arrival and keeps only the newest; every frame
overwritten before the pipeline took it is counted as dropped.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from sdk.frame import Frame
from sdk.pixels import copy_pixels, empty_like_pixels, same_layout
from sdk.sources.base import CorruptFrame, FrameReader
from sdk.spec.schema import Reconnect, Replay

IDLE_S = 0.25  # a live stream waiting for a frame calls on_idle this often (the watchdog's ping while a camera reconnects)


@dataclass
class StreamCounters:
    delivered: int = 0
    dropped: int = 0  # frames that existed but were never processed (late or overwritten)
    corrupt: int = 0  # frames that could not be decoded, skipped
    lost: int = 0  # frames a recording promised that never arrived: holes in its timestamps, a count it did not reach
    loops: int = 0
    out_of_order: int = 0  # frames of a stamped recording (mcap://, rosbag2://) stamped before the frame before them
    out_of_order_last: str | None = None
    disconnects: int = 0  # a live camera vanished and was reopened (or is being)
    reconnect_attempts: int = 0
    corrupt_last: str | None = None  # the reader's (the decoder's) message for the newest corrupt frame
    lost_last: str | None = None  # the reader's words for the newest lost frames
    reconnecting_since: float | None = None  # monotonic seconds; None while the camera delivers
    last_attempt_at: float | None = None  # monotonic seconds of the newest reopen attempt
    next_attempt_s: float = 0.0  # the wait before the next attempt (the backoff)
    missing_at_start: bool = False  # the camera was not there when the stream opened


class FrameStream:
    def __init__(
        self,
        reader: FrameReader,
        replay: Replay,
        *,
        max_frames: int | None = None,
        clock: Callable[[], int] = time.monotonic_ns,
        sleep: Callable[[float], None] = time.sleep,
        reconnect: Reconnect | None = None,
    ) -> None:
        self.reader = reader
        self.reconnect = reconnect
        self.replay = replay
        self.max_frames = max_frames if max_frames is not None else replay.frames
        self.counters = StreamCounters()
        self._clock = clock
        self._sleep = sleep
        self._live: _LiveCapture | None = None
        self._stop_requested = False
        self.on_idle: Callable[[], None] | None = None  # called every IDLE_S while a live stream waits for a frame
        self.on_end: Callable[[], None] | None = None  # called once when the frames end (before anything is closed)
        self.name = getattr(reader, "name", None) or type(reader).__name__
        self.source_ended = False  # the reader ran out (a recording's end, a camera gone for good), not stop() or the frame limit
        self.wait_for_camera = False  # a service waits for a camera absent at start; a measuring run (a health check) fails at once
        self.origin: SharedOrigin | None = None  # `pace: recorded` cameras of one run: the stamp and the time they count from

    def __enter__(self) -> FrameStream:
        missing = False
        try:
            self.reader.open()
        except Exception:
            if not (self.reader.live and self.reconnect is not None and self.wait_for_camera):
                raise
            missing = True  # a camera that is not there yet is retried like one that went away, not a failure
            self.counters.missing_at_start = True
        if self.reader.live:
            self._live = _LiveCapture(self.reader, self._clock, self.counters, self.reconnect, missing=missing)
            self._live.on_idle = self.on_idle
            if self._stop_requested:
                self._live.stop()
            self._live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.stop()
        self.reader.close()

    def __iter__(self) -> Iterator[Frame]:
        if self._stop_requested:
            return
        if self._live is not None:
            yield from self._live.frames(self.max_frames)
            self.source_ended = self._live.ended_by_source
        else:
            yield from self._recorded()
        if self.on_end is not None:
            self.on_end()

    def stop(self) -> None:
        """Ask the stream to end (from another thread or a signal handler)."""
        self._stop_requested = True
        if self._live is not None:
            self._live.stop()

    def reconnect_on_schedule(self, margin_s: float = 1.0) -> bool:
        """A live camera is being reconnected and its attempts keep their schedule (the next one is due
        within its backoff plus `margin_s`): the runtime is doing its job, not hung."""
        c = self.counters
        if c.reconnecting_since is None:
            return False
        last = c.last_attempt_at if c.last_attempt_at is not None else c.reconnecting_since
        return time.monotonic() <= last + c.next_attempt_s + margin_s

    def condition(self) -> str | None:
        """Why the source makes the service DEGRADED right now (a missing or reconnecting camera)."""
        c = self.counters
        if c.reconnecting_since is None:
            return None
        gone = time.monotonic() - c.reconnecting_since
        if c.missing_at_start and c.delivered == 0:
            return f"camera {self.name} missing ({c.reconnect_attempts} attempts in {gone:.1f} s)"
        return f"camera {self.name} reconnecting (gone for {gone:.1f} s, {c.reconnect_attempts} attempts)"

    def _next_image(self) -> np.ndarray | None:
        rewound = False
        while True:
            try:
                image = self.reader.read()
            except CorruptFrame as exc:
                self.counters.corrupt += 1
                self.counters.corrupt_last = str(exc)  # the reader's (the decoder's) own words
                continue
            finally:
                lost = getattr(self.reader, "lost_frames", 0)
                if lost != self.counters.lost:  # a hole the reader found (sdk/sources/frame_gaps.py)
                    self.counters.lost, self.counters.lost_last = lost, self.reader.lost_last
                backwards = getattr(self.reader, "out_of_order", 0)
                if backwards != self.counters.out_of_order:  # a stamp that went back (sdk/sources/recording.py)
                    self.counters.out_of_order, self.counters.out_of_order_last = backwards, self.reader.out_of_order_last
            if image is not None:
                return image
            if not self.replay.loop or rewound:
                return None  # end of stream (or an empty one even after a rewind)
            self.reader.rewind()
            self.counters.loops += 1
            rewound = True

    def _recorded(self) -> Iterator[Frame]:
        schedule = _Schedule(self.replay, self.reader, self.origin)
        index = 0
        while self.max_frames is None or self.counters.delivered < self.max_frames:
            loops = self.counters.loops
            image = self._next_image()
            if image is None:
                self.source_ended = True
                return
            if self.counters.loops != loops:
                schedule.rewound()
            now = self._clock()
            due = schedule.due(index, now)
            if due is None:
                t_capture = now
            else:
                if self.replay.late_frames == "drop":
                    # Newest wins: a frame whose successor is already due is stale.
                    while (following := schedule.next_due(index)) is not None and now >= following:
                        self.counters.dropped += 1
                        index += 1
                        image = self._next_image()
                        if image is None:
                            self.source_ended = True
                            return
                        due = schedule.due(index, now)
                        now = self._clock()
                if now < due:
                    self._sleep((due - now) / 1e9)
                t_capture = due
            self.counters.delivered += 1
            stamp, frame_id = getattr(self.reader, "stamp_ns", None), getattr(self.reader, "frame_id", None)
            file = getattr(self.reader, "file_name", None)
            yield Frame(index=index, t_capture_ns=t_capture, image=image, stamp_ns=stamp, frame_id=frame_id, file=file)
            index += 1


class SharedOrigin:
    """The stamp and the monotonic time every camera of a run at the recorded pace counts from: the earliest first
    stamp of them all, due when the first camera's first frame arrives, so frames of several topics keep their
    recorded order across the cameras."""

    def __init__(self, stamp_ns: int) -> None:
        self.stamp_ns = stamp_ns
        self._t0: int | None = None
        self._lock = threading.Lock()

    def t0(self, now: int) -> int:
        with self._lock:
            if self._t0 is None:
                self._t0 = now
            return self._t0


class _Schedule:
    """When a recorded frame is due (monotonic ns), or None where the replay is as fast as the pipeline goes.

    rate: frame i is due at t0 + i periods. recorded: at t0 + (its stamp - the first frame's stamp), never before
    the frame before it (a stamp that goes backwards is due at once)."""

    def __init__(self, replay: Replay, reader: FrameReader, origin: SharedOrigin | None = None) -> None:
        self.reader = reader
        self.origin = origin
        self.recorded = replay.pace == "recorded"
        rate = replay.rate_fps
        self.period_ns = int(round(1e9 / rate)) if rate else 0
        self.t0: int | None = None
        self.first_stamp: int | None = None
        self.last_due: int | None = None
        self.last_interval = 0  # the newest interval between two frames' stamps (a looped recording's seam)
        self.last_stamp: int | None = None

    def rewound(self) -> None:
        """A looped recording starts again: its first frame is due one interval after the last one."""
        if self.recorded and self.last_due is not None:
            self.t0, self.first_stamp, self.last_stamp = self.last_due + self.last_interval, None, None
            self.origin = None  # each camera loops on its own

    def due(self, index: int, now: int) -> int | None:
        if not self.recorded and not self.period_ns:
            return None
        if self.t0 is None:
            self.t0 = self.origin.t0(now) if self.recorded and self.origin is not None else now
        if not self.recorded:
            return self.t0 + index * self.period_ns
        stamp = self.reader.stamp_ns
        if self.first_stamp is None:
            self.first_stamp = self.origin.stamp_ns if self.origin is not None and self.origin.stamp_ns <= stamp else stamp
        due = self.t0 + (stamp - self.first_stamp)
        if self.last_stamp is not None and stamp > self.last_stamp:
            self.last_interval = stamp - self.last_stamp
        self.last_stamp = stamp
        self.last_due = due if self.last_due is None else max(due, self.last_due)
        return self.last_due

    def next_due(self, index: int) -> int | None:
        """When the frame after frame `index` is due (None: not known, or no more frames)."""
        if not self.recorded:
            return self.t0 + (index + 1) * self.period_ns
        stamp = self.reader.next_stamp_ns
        return None if stamp is None else max(self.t0 + (stamp - self.first_stamp), self.last_due)


class _LiveCapture:
    """A capture thread with a one-frame mailbox; buffers rotate, none is allocated per frame."""

    def __init__(
        self, reader: FrameReader, clock: Callable[[], int], counters: StreamCounters, reconnect: Reconnect | None = None, missing: bool = False
    ) -> None:
        self.reader = reader
        self.missing = missing
        self.on_idle: Callable[[], None] | None = None
        self.reconnect = reconnect
        self.clock = clock
        self.counters = counters
        self._condition = threading.Condition()
        self._mailbox: Frame | None = None
        self._pool: list[np.ndarray] = []
        self._ended = False
        self._stopping = False
        self.ended_by_source = False
        self._thread = threading.Thread(target=self._run, name="capture", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        with self._condition:
            self._stopping = True
            self._condition.notify_all()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        index = 0
        if self.missing and not self._reopen(disconnect=False):
            self._end()
            return
        while not self._stopping:
            try:
                image = self.reader.read()
            except CorruptFrame as exc:
                with self._condition:
                    self.counters.corrupt += 1
                    self.counters.corrupt_last = str(exc)
                index += 1
                continue
            except Exception:  # the device went away mid-read: the same as a camera that stopped
                image = None
            t_arrival = self.clock()
            if image is None:
                if self.reconnect is None or not self._reopen():
                    break
                continue
            with self._condition:
                slot = self._free_buffer(image)
                copy_pixels(slot, image)
                if self._mailbox is not None:
                    self.counters.dropped += 1
                    self._pool.append(self._mailbox.image)
                self._mailbox = Frame(index=index, t_capture_ns=t_arrival, image=slot)
                self._condition.notify_all()
            index += 1
        self._end()

    def _end(self) -> None:
        with self._condition:
            self._ended = True
            self.ended_by_source = not self._stopping
            self._condition.notify_all()

    def _reopen(self, disconnect: bool = True) -> bool:
        """Close and reopen the camera with a doubling backoff until it answers or the stream is stopped.
        The schedule is in the counters (`reconnecting_since`, `last_attempt_at`, `next_attempt_s`), so
        the runtime can tell a reconnect that keeps trying from a hung one."""
        c = self.counters
        delay = self.reconnect.initial_backoff_s
        with self._condition:
            c.disconnects += disconnect
            c.reconnecting_since, c.last_attempt_at, c.next_attempt_s = time.monotonic(), None, delay
        while True:
            if disconnect or c.reconnect_attempts:
                try:
                    self.reader.close()
                except Exception:
                    pass  # a vanished device may fail to close; opening again is what matters
            with self._condition:
                self._condition.wait_for(lambda: self._stopping, timeout=delay)  # stop() cuts the wait short
                if self._stopping:
                    return False
                c.reconnect_attempts += 1
                c.last_attempt_at = time.monotonic()
            try:
                self.reader.open()
            except Exception:
                delay = min(delay * 2, self.reconnect.max_backoff_s)
                with self._condition:
                    c.last_attempt_at, c.next_attempt_s = time.monotonic(), delay
                continue
            with self._condition:
                c.reconnecting_since = None
            return True

    def _free_buffer(self, like):
        while self._pool:
            buffer = self._pool.pop()
            if same_layout(buffer, like):
                return buffer
        return empty_like_pixels(like)

    def frames(self, max_frames: int | None) -> Iterator[Frame]:
        in_use: np.ndarray | None = None
        while max_frames is None or self.counters.delivered < max_frames:
            with self._condition:
                if in_use is not None:
                    self._pool.append(in_use)  # the consumer is done with the previous frame
                    in_use = None
                while self._mailbox is None and not self._ended and not self._stopping:
                    if not self._condition.wait(timeout=IDLE_S) and self.on_idle is not None:
                        self._condition.release()  # the callback must not hold up the capture thread
                        try:
                            self.on_idle()
                        finally:
                            self._condition.acquire()
                if self._mailbox is None:
                    return
                frame, self._mailbox = self._mailbox, None
                self.counters.delivered += 1
                in_use = frame.image
            yield frame
