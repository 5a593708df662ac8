"""Files that appear whole or not at all, and a service's outputs as a bounded series of such files.

A measuring run writes one file under a hidden temporary name and renames it into place when it
is complete. A service writes the same way, one segment at a time: the current segment is hidden
(`.detections.current.jsonl`), a finished one is published as `detections.000042.jsonl` (numbers
only grow), and retention deletes the oldest finished ones. The current segment of a run that was
killed is published by the next run when it opens (a torn last line trimmed), never truncated.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path

from sdk.durable import fsync_dir

MIB = 1 << 20
FREE_CHECK_S = 1.0  # free space is asked of the file system at most once a second per output
PRESENCE_CHECK_S = 1.0  # whether the current file is still in its folder: asked at most once a second per output


def partial_path(final: Path) -> Path:
    return final.with_name(f".{final.name}.partial")


def publish(partial: Path, final: Path) -> None:
    """fsync the finished file, rename it into place, fsync the folder (survives power loss)."""
    with partial.open("rb") as handle:
        os.fsync(handle.fileno())
    os.replace(partial, final)
    fsync_dir(final.parent)


def write_whole(final: Path, data: bytes | str) -> Path:
    """`data` at `final`, whole or not at all: written beside it under a hidden name, then published."""
    partial = partial_path(final)
    try:
        partial.write_bytes(data.encode() if isinstance(data, str) else data)
        publish(partial, final)
    except BaseException:
        partial.unlink(missing_ok=True)  # a full disk, a folder in the way: nothing of the try is left behind
        raise
    return final


class Segments:
    """The finished files of one output (`path` names the output: folder, stem and suffix) and its current one."""

    def __init__(self, path: Path, *, max_files: int, max_total_bytes: int, segment_bytes: int) -> None:
        self.path = Path(path)
        self.folder = self.path.parent
        self.stem, self.suffix = self.path.stem, self.path.suffix
        self.current = self.folder / f".{self.stem}.current{self.suffix}"  # the suffix stays last: OpenCV picks the container by it
        self.max_files = max_files
        self.max_total_bytes = max_total_bytes
        self.segment_bytes = segment_bytes
        self._pattern = re.compile(re.escape(self.stem) + r"\.(\d{6,})" + re.escape(self.suffix) + "$")
        self.published: list[str] = []  # by this run
        self.deleted = 0  # by retention, this run

    def finished(self) -> list[Path]:
        """Published files, oldest first."""
        found = []
        for entry in self.folder.iterdir() if self.folder.is_dir() else ():
            match = self._pattern.match(entry.name)
            if match:
                found.append((int(match.group(1)), entry))
        return [entry for _, entry in sorted(found)]

    def next_name(self) -> Path:
        files = self.finished()
        last = int(self._pattern.match(files[-1].name).group(1)) if files else 0
        return self.folder / f"{self.stem}.{last + 1:06d}{self.suffix}"

    def publish_current(self) -> Path:
        final = self.next_name()
        publish(self.current, final)
        self.published.append(final.name)
        self.prune()
        return final

    def prune(self) -> None:
        """Oldest first, until at most max_files are kept and the finished files leave room for a full current one."""
        files = self.finished()
        sizes = {f: _size(f) for f in files}
        total = sum(sizes.values())
        while files and (len(files) > self.max_files or total + self.segment_bytes > self.max_total_bytes):
            oldest = files.pop(0)
            oldest.unlink(missing_ok=True)
            total -= sizes[oldest]
            self.deleted += 1

    def total_bytes(self) -> int:
        return sum(_size(f) for f in self.finished()) + _size(self.current)


def describe_output(path: Path, stats: OutputStats, segments: Segments | None) -> dict:
    """A sink's line in the report and the service status: its output, its counts, and its segments (if rotating)."""
    info = {"output": path.name, **stats.as_dict()}
    if segments is not None:
        info["files_published"] = list(segments.published[-3:])
        info["files_published_count"] = len(segments.published)
        info["files_deleted"] = segments.deleted
    return info


class FreeSpace:
    """Free MiB on an output's disk, asked at most once a second; `below(floor)` is the question a sink asks per frame."""

    def __init__(self, folder: Path, clock=time.monotonic) -> None:
        self.folder = folder
        self.clock = clock
        self._checked = -1e9
        self.free_mb: float | None = None

    def below(self, floor_mb: float) -> bool:
        if floor_mb <= 0:
            return False
        now = self.clock()
        if now - self._checked >= FREE_CHECK_S:
            self._checked = now
            try:
                self.free_mb = shutil.disk_usage(self.folder).free / MIB
            except OSError:
                self.free_mb = None
        return self.free_mb is not None and self.free_mb < floor_mb


def identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of the file at `path`, or None where there is none."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


class Presence:
    """Whether an output's current file is still where it is published from, asked at most every PRESENCE_CHECK_S.

    A folder removed under a running sink (`rm -rf output`) takes the current file with it while the
    sink's descriptor still writes into the deleted file: every frame in that file is lost, however
    many the sink counted as written. `gone()` tells it, so the sink counts them and starts again."""

    def __init__(self, clock=time.monotonic) -> None:
        self.clock = clock
        self.path: Path | None = None
        self.file: tuple[int, int] | None = None
        self._checked = -1e9

    def track(self, path: Path, file: tuple[int, int] | None = None) -> None:
        """From now on `path` is the current file (`file`: its identity, else read now)."""
        self.path, self.file = path, file if file is not None else identity(path)
        self._checked = self.clock()

    def gone(self, now: bool = False) -> bool:
        """The tracked file is no longer at its path (removed, or its folder with it); asked now, or when due."""
        if self.path is None:
            return False
        t = self.clock()
        if not now and t - self._checked < PRESENCE_CHECK_S:
            return False
        self._checked = t
        found = identity(self.path)
        return found is None or (self.file is not None and found != self.file)


def recreate_folder(folder: Path) -> str | None:
    """Make `folder` again (and its parents); None on success, else why it cannot be made."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return f"cannot recreate {folder}: {os.strerror(exc.errno) if exc.errno else exc}"
    return None


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


class OutputStats:
    """What became of the frames handed to one output: written, or not written and why (counted exactly)."""

    def __init__(self, output: str) -> None:
        self.output = output
        self.written = 0
        self.not_written = 0
        self.failing: str | None = None  # why frames are not being written right now; None: they are
        self.failing_since: float | None = None
        self.last_error: str | None = None
        self.synced_frame: int | None = None  # the newest frame known to be on the disk (fsync)
        self.synced_at: float | None = None

    def ok(self) -> None:
        self.written += 1
        if self.failing is not None:
            self.failing, self.failing_since = None, None

    def lost(self, why: str) -> None:
        self.not_written += 1
        if self.failing is None:
            self.failing_since = time.time()
        self.failing = self.last_error = why

    def unwritten(self, frames: int, why: str) -> None:
        """`frames` counted as written are not on the disk after all (their file was removed): not written."""
        frames = min(frames, self.written)
        self.written -= frames
        self.not_written += frames
        self.last_error = why

    def condition(self) -> str | None:
        if self.failing is None:
            return None
        return f"{self.output}: frames not written ({self.failing}); {self.not_written} not written so far"

    def as_dict(self) -> dict:
        return {
            "written": self.written,
            "not_written": self.not_written,
            "failing": self.failing,
            "last_error": self.last_error,
            "synced_frame": self.synced_frame,
            "synced_age_s": None if self.synced_at is None else round(time.monotonic() - self.synced_at, 3),
        }


def trim_torn_tail(path: Path) -> int:
    """Cut a text file back to its last complete line (a kill mid-write); returns the bytes kept."""
    size = _size(path)
    if size == 0:
        return 0
    with path.open("r+b") as handle:
        step = 4096
        end = size
        while end > 0:
            start = max(0, end - step)
            handle.seek(start)
            chunk = handle.read(end - start)
            cut = chunk.rfind(b"\n")
            if cut >= 0:
                keep = start + cut + 1
                if keep != size:
                    handle.truncate(keep)
                return keep
            end = start
        handle.truncate(0)
        return 0


def finished_files(path: Path) -> list[Path]:
    """The published segments of the service output `path` (e.g. output/detections.jsonl), oldest first."""
    return Segments(path, max_files=1, max_total_bytes=1, segment_bytes=0).finished()
