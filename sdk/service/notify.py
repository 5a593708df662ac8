"""systemd's notification protocol (sd_notify): READY, WATCHDOG, STATUS, STOPPING.

A datagram to the AF_UNIX socket named in $NOTIFY_SOCKET (a leading '@' is the abstract
namespace). Written here with the standard library: the python-systemd binding is not on every
device, and the protocol is one sendto(). The project's own supervisor listens on the same
protocol, so the runtime behaves the same under systemd and without it.
"""

from __future__ import annotations

import os
import socket


class Notifier:
    def __init__(self, address: str | None = None) -> None:
        address = address if address is not None else os.environ.get("NOTIFY_SOCKET")
        self.address = None
        self._socket = None
        if address:
            self.address = "\0" + address[1:] if address.startswith("@") else address
            self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        usec = os.environ.get("WATCHDOG_USEC")
        # Ping at half the watchdog period, as sd_watchdog_enabled() recommends.
        self.watchdog_interval_s = int(usec) / 2e6 if usec and usec.isdigit() and int(usec) > 0 else None

    @property
    def enabled(self) -> bool:
        return self._socket is not None

    def send(self, *fields: str) -> bool:
        if self._socket is None:
            return False
        try:
            self._socket.sendto("\n".join(fields).encode(), self.address)
            return True
        except OSError:  # the manager went away: keep running, a service must not die of its monitor
            return False

    def ready(self, status: str = "") -> bool:
        return self.send("READY=1", f"MAINPID={os.getpid()}", *([f"STATUS={status}"] if status else []))

    def watchdog(self) -> bool:
        return self.send("WATCHDOG=1")

    def status(self, text: str) -> bool:
        return self.send(f"STATUS={text}")

    def stopping(self) -> bool:
        return self.send("STOPPING=1")

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None
