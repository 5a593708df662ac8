"""The supervisor's state, asked of the supervisor itself: no file in between (standard library only).

supervisor.json and status.json are what `sdk status` reads, but a full disk refuses them: the runtime runs
while its files still say `starting` (or nothing). So the supervisor also answers on an abstract Unix socket
named by its PID (no file, nothing to clean up), from its main loop: one connection, one JSON line with its state as it is in
memory, and the runtime's last heartbeat (the STATUS= line of the notification protocol, which reaches the
supervisor without a disk). A socket name can be taken by anyone, so the answer counts only when the kernel
says (SO_PEERCRED) that the process at the other end is the supervisor the caller verified by its lock.
"""

from __future__ import annotations

import json
import socket
import struct

ANSWER_TIMEOUT_S = 1.0
MAX_ANSWER = 1 << 20


def address(pid: int) -> str:
    return f"\0sdk-supervisor-state-{pid}"


class LiveState:
    """Answers each connection with `describe()` as one JSON line, when its owner calls `answer()` (its main loop, which
    selects on `fileno()`). No thread: a thread of the supervisor could outlive its main thread for a moment as it
    dies, and the runtime's parent-death signal follows the thread that started it."""

    def __init__(self, pid: int, describe) -> None:
        self.describe = describe
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._socket.bind(address(pid))
        self._socket.listen(8)
        self._socket.setblocking(False)

    def fileno(self) -> int:
        return self._socket.fileno()

    def answer(self) -> None:
        """Every connection waiting now; never raises, never waits for a caller that does not read."""
        while True:
            try:
                conn, _ = self._socket.accept()
            except OSError:
                return  # none waiting (or closed)
            try:
                conn.settimeout(ANSWER_TIMEOUT_S / 4)
                conn.sendall((json.dumps(self.describe()) + "\n").encode())
            except Exception:  # noqa: S110, BLE001 - a caller that went away, a state that cannot be said: the next one is answered
                pass
            finally:
                conn.close()

    def close(self) -> None:
        self._socket.close()


def ask(pid: int, timeout_s: float = ANSWER_TIMEOUT_S) -> dict | None:
    """The live state of the supervisor `pid` (verified by the caller), or None: it does not answer (an earlier
    version, gone, busy) or the process at the other end is not `pid`."""
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.settimeout(timeout_s)
    try:
        client.connect(address(pid))
        peer, _, _ = struct.unpack("3i", client.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
        if peer != pid:
            return None
        data = b""
        while not data.endswith(b"\n") and len(data) < MAX_ANSWER:
            chunk = client.recv(65536)
            if not chunk:
                break
            data += chunk
        answer = json.loads(data)
    except (OSError, ValueError):
        return None
    finally:
        client.close()
    return answer if isinstance(answer, dict) else None
