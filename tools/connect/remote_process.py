"""A command left running on a target over SSH (the deploy lock's holder), with heartbeats."""

from __future__ import annotations

import threading
import time

from sdk.errors import TargetError

# paramiko's largest packet. Its Channel.sendall copies what is left of the data after every packet it sends, which is
# quadratic in the size of one call: 56 CPU-seconds for the selftest's bundle sent whole. Sent a packet at a time,
# nothing is copied twice (decision 1110).
PACKET_BYTES = 32 * 1024


def send_all(channel, data: bytes, timeout: float | None = None) -> None:
    """Everything in `data` to the channel (its `sendall`, one packet's worth at a time). `timeout`: how long the
    channel's window may stay full (the channel's own timeout while sending, restored afterwards)."""
    previous = channel.gettimeout()
    if timeout is not None:
        channel.settimeout(timeout)
    try:
        view = memoryview(data)
        for start in range(0, len(view), PACKET_BYTES):
            channel.sendall(view[start : start + PACKET_BYTES].tobytes())
    finally:
        channel.settimeout(previous)


class RemoteProcess:
    """A command left running on the target; closing its channel ends it (EOF on stdin, then hang-up)."""

    def __init__(self, channel, where: str) -> None:
        self.channel = channel
        self.where = where
        self._buffer = bytearray()
        self._beating: threading.Event | None = None

    def read_line(self, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        self.channel.settimeout(0.2)
        while b"\n" not in self._buffer:
            if time.monotonic() > deadline:
                raise TargetError(f"{self.where}: no answer within {timeout:.0f} s")
            try:
                chunk = self.channel.recv(4096)
            except TimeoutError:
                continue
            if not chunk:
                break
            self._buffer += chunk
        line, _, rest = bytes(self._buffer).partition(b"\n")
        self._buffer = bytearray(rest)
        return line.decode("utf-8", "replace")

    def heartbeat(self, every: float) -> None:
        """Send a line every `every` seconds until closed (the device side takes silence for death)."""
        self._beating = threading.Event()

        def beat() -> None:
            while not self._beating.wait(every):
                try:
                    self.channel.sendall(b"\n")
                except (OSError, EOFError):
                    return

        threading.Thread(target=beat, name="sdk-lock-heartbeat", daemon=True).start()

    def close(self) -> str:
        """End the command; returns what it wrote on stderr."""
        if self._beating is not None:
            self._beating.set()
        stderr = bytearray()
        try:
            self.channel.shutdown_write()
            self.channel.settimeout(5.0)
            while True:
                chunk = self.channel.recv_stderr(65536)
                if not chunk:
                    break
                stderr += chunk
        except (OSError, EOFError, TimeoutError):
            pass
        finally:
            self.channel.close()
        return stderr.decode("utf-8", "replace")
