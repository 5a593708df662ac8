"""FFmpeg's own word on a damaged frame: its av_log lines, read off this process's stderr.

OpenCV's FFmpeg backend decodes a damaged frame by concealing the damage and returns it as good;
only FFmpeg's log says so ("[msmpeg4 @ 0x55d0...] ignoring overflow at 7 11", "[h264 @ ...] error
while decoding MB ..."), written with av_log to file descriptor 2. While a file source is open,
`DecoderLog` puts a pipe in front of fd 2: a thread passes every byte on to the real stderr (no
line is lost or reordered) and remembers the FFmpeg lines. `checkpoint()` writes a marker through
the same pipe and waits until the thread has read it, so every line the decoder wrote before it is
counted: the lines that appeared during one read() belong to that frame. With FFmpeg's frame
threads a message may surface one read later; the count of damaged frames is then right within
those few frames, and every frame is still either delivered or counted corrupt.

One per process (fd 2 is the process's); nested opens share it. A native crash's traceback
(faulthandler) is pointed at the real stderr while the pipe is in place. A process that exits with the tap still in
place (an error raised before its source was closed) closes it at exit, so the last lines it wrote (the runtime's own
`error:` line) reach the real stderr: the pump is a daemon thread, which the interpreter would stop mid-pipe.
"""

from __future__ import annotations

import atexit
import faulthandler
import os
import re
import sys
import threading

FFMPEG_LINE = re.compile(rb"^\[[A-Za-z0-9_:. -]+ @ 0x[0-9a-fA-F]+\] (.*)$")
MARKER = b"\x1esdk-decoder-checkpoint "
MAX_PENDING = 4096  # a partial line longer than this is passed on as it is


class DecoderLog:
    _shared: DecoderLog | None = None
    _users = 0
    _guard = threading.Lock()

    @classmethod
    def acquire(cls) -> DecoderLog | None:
        """The process's tap on fd 2 (made on first use); None where fd 2 cannot be redirected."""
        with cls._guard:
            if cls._shared is None:
                try:
                    cls._shared = cls()
                except OSError:
                    return None
            cls._users += 1
            return cls._shared

    @classmethod
    def release(cls) -> None:
        with cls._guard:
            cls._users -= 1
            if cls._users <= 0 and cls._shared is not None:
                cls._shared._close()
                cls._shared, cls._users = None, 0

    @classmethod
    def _at_exit(cls) -> None:
        with cls._guard:
            if cls._shared is not None:
                cls._shared._close()
                cls._shared, cls._users = None, 0

    def __init__(self) -> None:
        atexit.unregister(DecoderLog._at_exit)  # registered once, however many taps the process opened and closed
        atexit.register(DecoderLog._at_exit)
        sys.stderr.flush()
        self._real = os.dup(2)
        read_end, write_end = os.pipe()
        pipe = os.fstat(write_end)
        self._pipe_id = (pipe.st_dev, pipe.st_ino)
        os.dup2(write_end, 2)
        os.close(write_end)
        self._read_end = read_end
        self._condition = threading.Condition()
        self.count = 0  # FFmpeg lines seen
        self.last: str | None = None
        self._asked = 0
        self._seen = 0
        self._faulthandler = faulthandler.is_enabled()
        if self._faulthandler:
            faulthandler.enable(file=self._real, all_threads=True)
        self._thread = threading.Thread(target=self._pump, name="decoder-log", daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        pending = b""
        while True:
            try:
                data = os.read(self._read_end, 65536)
            except OSError:
                data = b""
            if not data:
                if pending:
                    self._forward(pending)
                return
            pending += data
            *lines, pending = pending.split(b"\n")
            out = []
            for line in lines:
                if line.startswith(MARKER):
                    with self._condition:
                        self._seen = max(self._seen, int(line[len(MARKER) :] or 0))
                        self._condition.notify_all()
                    continue
                match = FFMPEG_LINE.match(line)
                if match:
                    with self._condition:
                        self.count += 1
                        self.last = line.decode(errors="replace")
                out.append(line + b"\n")
            if len(pending) > MAX_PENDING:
                out.append(pending)
                pending = b""
            if out:
                self._forward(b"".join(out))

    def _forward(self, data: bytes) -> None:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(self._real, view) :]
        except OSError:
            pass  # the real stderr is gone: nothing to keep it for

    def checkpoint(self, timeout_s: float = 1.0) -> int:
        """The number of FFmpeg lines written so far, all of them read (waits for the pump, at most `timeout_s`).

        When something else has put its own file on fd 2 since (a test harness's capture, a log rotation),
        FFmpeg no longer writes to the pipe: nothing is waited for, the count stays as it is."""
        if not self.in_place():
            return self.count
        with self._condition:
            self._asked += 1
            asked = self._asked
        try:
            os.write(2, MARKER + str(asked).encode() + b"\n")
        except OSError:
            return self.count
        with self._condition:
            self._condition.wait_for(lambda: self._seen >= asked, timeout=timeout_s)
            return self.count

    def in_place(self) -> bool:
        """fd 2 is still this tap's pipe."""
        try:
            st = os.fstat(2)
        except OSError:
            return False
        return (st.st_dev, st.st_ino) == self._pipe_id

    def _close(self) -> None:
        sys.stderr.flush()
        os.dup2(self._real, 2)  # the pipe's last writer is gone: the pump reads to the end and stops
        self._thread.join(timeout=5)
        os.close(self._read_end)
        if self._faulthandler:
            faulthandler.enable(file=sys.stderr, all_threads=True)
        os.close(self._real)
