"""A device command left running on the local target (the deploy lock's holder), with heartbeats.

The same `python -m sdk store hold-lock` that holds a vehicle's lock over SSH, as a child process:
its stdin is a pipe, so when this deploy dies (even by SIGKILL) the holder reads end-of-file at once,
rolls back this deploy's unfinished trial and frees the lock.
"""

from __future__ import annotations

import subprocess
import threading

from sdk.errors import TargetError


class LocalProcess:
    def __init__(self, argv: list[str], where: str = "local") -> None:
        self.where = where
        self.process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self._beating: threading.Event | None = None

    def read_line(self, timeout: float) -> str:
        result: list[bytes] = []
        reader = threading.Thread(target=lambda: result.append(self.process.stdout.readline()), daemon=True)
        reader.start()
        reader.join(timeout)
        if reader.is_alive():
            raise TargetError(f"{self.where}: no answer within {timeout:.0f} s")
        return result[0].decode("utf-8", "replace") if result else ""

    def heartbeat(self, every: float) -> None:
        self._beating = threading.Event()

        def beat() -> None:
            while not self._beating.wait(every):
                try:
                    self.process.stdin.write(b"\n")
                    self.process.stdin.flush()
                except (OSError, ValueError):
                    return

        threading.Thread(target=beat, name="sdk-lock-heartbeat", daemon=True).start()

    def close(self) -> str:
        """End the holder (EOF on its stdin) and wait for it; returns what it wrote on stderr."""
        if self._beating is not None:
            self._beating.set()
        try:  # communicate() closes its stdin: end-of-file ends the lease
            _, stderr = self.process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            _, stderr = self.process.communicate()
        return stderr.decode("utf-8", "replace")
