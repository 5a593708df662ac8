"""service.log: bounded by size with a number of old files kept, and written even on a full disk.

The supervisor is the only writer: the runtime's stdout and stderr come to it through a pipe, and
its own stray output (fd 1 and 2) points at the current file. When a write fails because the disk
is full, the reserve (a file of RESERVE_BYTES kept beside the log) is deleted and the write tried
again, so the last words of a crash on a full disk (a traceback) still reach the log; the reserve
is made again when space returns. What could not be written at all is counted and said in the
first line that can be.
"""

from __future__ import annotations

import errno
import faulthandler
import os
import time
from pathlib import Path

RESERVE_BYTES = 256 * 1024
RESERVE_RETRY_S = 5.0


class RotatingLog:
    def __init__(self, path: Path, max_bytes: int, keep: int) -> None:
        self.path = Path(path)
        self.max_bytes = max(int(max_bytes), 4096)
        self.keep = max(int(keep), 0)
        self.reserve = self.path.with_name(f".{self.path.name}.reserve")
        self.fd = -1
        self.lost_bytes = 0
        self.lost_error: str | None = None
        self._reserve_tried = 0.0
        self._stdio = False
        self._open()
        self._make_reserve()

    def _open(self) -> None:
        self.fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)

    def adopt_stdio(self) -> None:
        """This process's own fd 1 and 2 (and faulthandler) write to the current file."""
        for target in (1, 2):
            try:
                os.dup2(self.fd, target, inheritable=False)
            except OSError:
                pass
        faulthandler.enable(file=2, all_threads=True)
        self._stdio = True

    def _make_reserve(self) -> None:
        self._reserve_tried = time.monotonic()
        try:
            if self.reserve.exists() and self.reserve.stat().st_size >= RESERVE_BYTES:
                return
            fd = os.open(self.reserve, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
            try:
                os.write(fd, b"\0" * RESERVE_BYTES)  # real blocks (tmpfs and ext4 alike), not a sparse promise
            finally:
                os.close(fd)
        except OSError:
            self.reserve.unlink(missing_ok=True)  # no space for it now: tried again later

    def _rotate(self) -> None:
        os.close(self.fd)
        self.fd = -1
        try:
            for index in range(self.keep, 0, -1):
                older = self.path.with_name(f"{self.path.name}.{index}")
                if index == self.keep:
                    older.unlink(missing_ok=True)
                newer = self.path.with_name(f"{self.path.name}.{index - 1}") if index > 1 else self.path
                if newer.exists():
                    os.replace(newer, older)
            if self.keep == 0:
                self.path.unlink(missing_ok=True)
        finally:
            self._open()
            if self._stdio:
                self.adopt_stdio()

    def write(self, data: bytes) -> bool:
        """Append `data` (rotating first when it would pass the size); False when it could not be written."""
        if not data:
            return True
        if self.fd < 0:
            self._open()
        try:
            if os.fstat(self.fd).st_size + len(data) > self.max_bytes:
                self._rotate()
        except OSError:
            pass
        if self.lost_bytes and not self._lost_noted():
            self._count(data)
            return False
        if self._write(data):
            if not self.reserve.exists() and time.monotonic() - self._reserve_tried > RESERVE_RETRY_S:
                self._make_reserve()
            return True
        self._count(data)
        return False

    def _lost_noted(self) -> bool:
        note = f"[log] {self.lost_bytes} bytes of log could not be written ({self.lost_error})\n".encode()
        if self._write(note):
            self.lost_bytes, self.lost_error = 0, None
            return True
        return False

    def _write(self, data: bytes) -> bool:
        for attempt in (1, 2):
            try:
                view = memoryview(data)
                while view:
                    written = os.write(self.fd, view)
                    view = view[written:]
                return True
            except OSError as exc:
                if exc.errno not in (errno.ENOSPC, errno.EDQUOT) or attempt == 2 or not self.reserve.exists():
                    self.lost_error = os.strerror(exc.errno) if exc.errno else str(exc)
                    return False
                self.reserve.unlink(missing_ok=True)  # the emergency space: these words matter more
                self._reserve_tried = time.monotonic()
        return False

    def _count(self, data: bytes) -> None:
        self.lost_bytes += len(data)
        self.lost_error = self.lost_error or "write failed"

    def line(self, text: str) -> bool:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
        return self.write(f"{stamp}Z [supervisor {os.getpid()}] {text.rstrip()}\n".encode(errors="replace"))

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
