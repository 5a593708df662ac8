"""detections.jsonl: one line per frame (frame, t_capture_ns, stamp_ns and frame_id where the recording stamps its
frames, file where the source is a folder of images, detections with label, score, box, keypoints where decoded, and
track_id, track_age, track_state where the pipeline tracks).

Every line goes to the kernel as one write() when its frame is done: a kill -9 of the runtime loses
no line it wrote (the page cache outlives the process). `sync()` (the sink group's sync thread,
every `sync_interval_s`) fsyncs the current file and records the newest frame on the disk, so a
power cut loses at most that interval. A line that cannot be written (a full disk, the free-space
floor) is not half-written: it is counted as not written, with the reason, and the next frame tries
again, so writing resumes when space returns.

A current file removed under the sink (its folder deleted) is noticed within a second: the frames in it
are counted not written, and a new current file begins in the folder, made again (where it cannot be
made, every frame is counted not written, with the reason, and it is tried again each second).

A measuring run writes one file (`.detections.jsonl.partial`, published as `detections.jsonl` when
complete). A service (`retention` given) writes segments (sdk/sinks/files.py): rotated by size or
age, pruned by retention, and the killed run's current segment published on the next open.
"""

from __future__ import annotations

import errno
import json
import os
import sys
import threading
import time
from pathlib import Path

from sdk.frame import Frame
from sdk.postprocess.detections import Detection, Detections
from sdk.sinks.files import (
    MIB,
    FreeSpace,
    OutputStats,
    Presence,
    Segments,
    describe_output,
    partial_path,
    publish,
    recreate_folder,
    trim_torn_tail,
)

ROTATE_RETRY_S = 1.0
EXACT_DECIMALS = 9  # an exact sink's classes and keypoints-free fields (classify, segment): as good as exact


def _record(d: Detection, r: int | None) -> dict:
    """`r`: decimals of the box (the score keeps 4); None: every digit of both (an evaluation run scores them)."""
    if r is None:
        record = {"label": d.label, "score": float(d.score), "box": [float(v) for v in d.box]}
    else:
        record = {"label": d.label, "score": round(d.score, 4), "box": [round(v, r) for v in d.box]}
    if d.keypoints:  # decoders with keypoints (postprocess.decoder.keypoints): [[x, y], ...] in source pixels
        k = r if r is not None else EXACT_DECIMALS
        record["keypoints"] = [[round(x, k), round(y, k)] for x, y in d.keypoints]
    if d.track_state is not None:  # a `track:` stage: the id (null until the track is confirmed), its age in frames, its state
        record["track_id"] = d.track_id
        record["track_age"] = d.track_age
        record["track_state"] = d.track_state
    if d.secondary:  # the cascade steps' results on this detection's crop (pipeline `cascade:`), by step name
        record["secondary"] = d.secondary
    return record


class JsonlSink:
    name = "jsonl"

    def __init__(self, path: Path, *, decimals: int | None = 2, rotate=None, retention=None, sync_interval_s: float | None = None) -> None:
        self.path = Path(path)
        self.decimals = decimals
        self.durable = retention is not None
        self.sync_interval_s = sync_interval_s
        self.stats = OutputStats(self.path.name)
        self.segments: Segments | None = None
        self._current = partial_path(self.path)
        if self.durable:
            segment_bytes = int((rotate.max_mb if rotate is not None else 64) * MIB)
            self.segments = Segments(
                self.path, max_files=retention.max_files, max_total_bytes=int(retention.max_total_mb * MIB), segment_bytes=segment_bytes
            )
            self._current = self.segments.current
            self.max_age_s = rotate.max_age_s if rotate is not None else None
            self.floor_mb = retention.detections_min_free_mb
        self.free = FreeSpace(self.path.parent)
        self.presence = Presence()
        self._fd = -1
        self._size = 0
        self._lines = 0  # in the current file: the frames lost with it if it is removed
        self._unopened: str | None = None  # why there is no current file (its folder could not be made again)
        self._opened_at = 0.0
        self._rotate_after = 0.0
        self._last_index: int | None = None
        self._lock = threading.Lock()  # the fd against the sync thread (rotation and close swap it)
        self.masks: tuple[str, int] | None = None  # a mask sink's folder and `every`: a segment line names the frame's PNG

    def open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.durable:
            self._recover()
        self._open_current()

    def _recover(self) -> None:
        current = self.segments.current
        if not current.exists():
            return
        if trim_torn_tail(current) == 0:
            current.unlink()
            return
        final = self.segments.publish_current()
        sys.stderr.write(f"note: {self.path.name}: the current file of an earlier run that did not close it was kept as {final.name}\n")

    def _open_current(self) -> None:
        self._fd = os.open(self._current, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND | os.O_CLOEXEC, 0o644)
        st = os.fstat(self._fd)
        self.presence.track(self._current, (st.st_dev, st.st_ino))
        self._size = self._lines = 0
        self._opened_at = time.monotonic()

    def _lost_current(self) -> None:
        """The current file is gone from its folder (removed, or the folder with it): its frames are counted not
        written, and a new current file begins in the folder, made again where it went (or the reason is kept)."""
        with self._lock:
            self._lose_current()
            self._reopen()

    def _lose_current(self) -> None:
        """(lock held) Count the current file's frames as not written and let go of it."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        lost, self._lines, self._size = self._lines, 0, 0
        self.stats.unwritten(lost, f"{self._current.name} was removed with {lost} frame(s) in it")
        sys.stderr.write(f"warning: {self.path.name}: the current file was removed from {self._current.parent}: {lost} frame(s) lost\n")

    def _reopen(self) -> None:
        self._unopened = recreate_folder(self._current.parent)
        if self._unopened is None:
            try:
                self._open_current()
            except OSError as exc:
                self._unopened = f"cannot open {self._current.name}: {_reason(exc)}"

    def line(self, frame: Frame, detections: Detections) -> bytes:
        r = self.decimals
        line = {"camera": frame.camera} if frame.camera is not None else {}  # `sources:`: whose frame (numbers are per camera)
        line |= {
            "frame": frame.index,
            "t_capture_ns": frame.t_capture_ns,
        }
        if frame.stamp_ns is not None:  # a recording's own stamp of the frame (mcap://, rosbag2://) and its frame id
            line |= {"stamp_ns": frame.stamp_ns, "frame_id": frame.frame_id}
        if frame.file is not None:  # images://: the file the frame was read from (labels kept per file find it)
            line["file"] = frame.file
        line |= {
            "detections": [_record(d, r) for d in detections],
        }
        fields = getattr(detections, "jsonl_fields", None)
        if fields is not None:  # classify: classes [{label, score}]; segment: mask (file or null), pixels {label: count}
            line.update(fields(r if r is not None else EXACT_DECIMALS))
            if "mask" in line and self.masks is not None and frame.index % self.masks[1] == 0:
                line["mask"] = f"{self.masks[0]}/{frame.index:06d}.png"
        return (json.dumps(line, separators=(",", ":")) + "\n").encode()

    def write(self, frame: Frame, detections: Detections) -> None:
        data = self.line(frame, detections)
        if self.presence.gone():  # at most once a second: the current file still in its folder (or, without one, made again)
            if self._fd >= 0:
                self._lost_current()
            else:
                with self._lock:
                    self._reopen()
        if self._fd < 0:
            self.stats.lost(self._unopened or "no current file")
            return
        if self.durable:
            if self.free.below(self.floor_mb):
                self.stats.lost(f"free space {self.free.free_mb:.1f} MiB is below detections_min_free_mb {self.floor_mb:g}")
                return
            now = time.monotonic()
            full = self._size + len(data) > self.segments.segment_bytes
            old = self.max_age_s is not None and now - self._opened_at >= self.max_age_s
            if self._size and (full or old) and now >= self._rotate_after:
                self._rotate()
                if self._fd < 0:
                    self.stats.lost(self._unopened or "no current file")
                    return
        try:
            written = os.write(self._fd, data)
        except OSError as exc:
            self.stats.lost(_reason(exc))
            return
        if written < len(data):  # the disk filled inside this line: a torn line is no line
            try:
                os.ftruncate(self._fd, self._size)
            except OSError:
                pass
            self.stats.lost(os.strerror(errno.ENOSPC))  # the partial line is removed: counted like any line not written
            return
        self._size += written
        self._lines += 1
        self._last_index = frame.index
        self.stats.ok()

    def _rotate(self) -> None:
        if self.presence.gone(now=True):
            self._lost_current()
            return
        with self._lock:
            os.close(self._fd)
            self._fd = -1
            try:
                self.segments.publish_current()
            except OSError as exc:  # the current file stays current; tried again a second later
                self.stats.last_error = f"cannot finish {self._current.name}: {_reason(exc)}"
                self._rotate_after = time.monotonic() + ROTATE_RETRY_S
                try:
                    self._fd = os.open(self._current, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
                except OSError:  # removed meanwhile
                    self._lose_current()
                    self._reopen()
                return
            self._open_current()

    def sync(self) -> None:
        """fsync the current file; the newest frame written before it is then on the disk."""
        with self._lock:
            if self._fd < 0:
                return
            newest = self._last_index
            try:
                os.fsync(self._fd)
            except OSError as exc:
                self.stats.last_error = f"fsync: {_reason(exc)}"
                return
        if newest is not None:
            self.stats.synced_frame = newest
            self.stats.synced_at = time.monotonic()

    def close(self) -> None:
        with self._lock:
            if self._fd < 0:
                return
            if self.presence.gone(now=True):  # removed with its folder: nothing to publish, its frames are lost
                self._lose_current()
                return
            os.close(self._fd)
            self._fd = -1
            try:
                if self.durable:
                    if self._size == 0 and self._current.stat().st_size == 0:
                        self._current.unlink()
                        return
                    self.segments.publish_current()
                else:
                    publish(self._current, self.path)
            except OSError as exc:  # removed between the check and the publication
                self._lose_current()
                self.stats.last_error = f"cannot publish {self._current.name}: {_reason(exc)}"
                return
        self.stats.synced_frame = self._last_index

    def describe(self) -> dict:
        return describe_output(self.path, self.stats, self.segments)


def _reason(exc: OSError) -> str:
    return os.strerror(exc.errno) if exc.errno else str(exc)
