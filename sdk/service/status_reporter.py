"""The service's status: status.json every interval and the manager's and vehicle's heartbeat, each from a thread of
its own that outlives any error, never touching the frame path (sdk/service/serve.py runs it)."""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
from pathlib import Path

from sdk.runtime.health import DEGRADED, NOMINAL, STARTING, STOPPED, HealthMonitor
from sdk.service.files import STATUS_FILE, clock_stamp, write_error_text, write_json_atomic
from sdk.service.notify import Notifier
from sdk.service.realtime import GcOutOfTheLoop


def write_status(folder: Path, status: dict) -> None:
    write_json_atomic(folder / STATUS_FILE, status)


class StatusReporter:
    """Publishes the monitor's snapshot from two threads of its own, so that neither can stop the other.

    `status-file` writes status.json every interval and survives every write error: it counts the
    failures, keeps the first error and its time, and says both in the next status it can write.
    `heartbeat` tells the manager (sd_notify STATUS) and the vehicle (UDP) every interval, runs the
    garbage collector, and watches the supervisor: a runtime whose supervisor is gone stops itself.
    Neither touches the frame path. A runtime that stops producing frames is DEGRADED ("no frame for
    N s"), never NOMINAL; one that stops writing is called stale by `sdk status` from the file's age."""

    def __init__(
        self,
        folder: Path,
        monitor: HealthMonitor,
        notifier: Notifier,
        interval_s: float,
        extra: dict,
        udp: str | None,
        live=None,
        stall_s: float | None = None,
        on_orphaned=None,
        follow=None,
        on_status=None,
    ) -> None:
        self.folder, self.monitor, self.notifier, self.interval_s, self.extra = folder, monitor, notifier, interval_s, extra
        self.live = live  # counters and conditions that change while running (source, sinks)
        self.stall_s = stall_s
        self.on_orphaned = on_orphaned
        self.follow = follow  # () -> why this runtime must give way to another release, or None (sdk/service/follow.py)
        self.on_status = on_status  # (status) -> None, once an interval: the runtime's own log lines (sdk/service/runtime_log.py)
        self.parent = int(os.environ.get("SDK_SUPERVISOR_PID", "0") or 0)
        self._udp = None
        if udp:
            host, _, port = udp.rpartition(":")
            self._udp = (socket.socket(socket.AF_INET, socket.SOCK_DGRAM), (host, int(port)))
        self._stop = threading.Event()
        self._file_thread = threading.Thread(target=self._files, name="status-file", daemon=True)
        self._beat_thread = threading.Thread(target=self._beats, name="heartbeat", daemon=True)
        self.gc: GcOutOfTheLoop | None = None
        self.write_failures = 0
        self.write_error: str | None = None
        self.write_error_since: float | None = None
        self.writes = 0

    def snapshot(self) -> dict:
        live = self.live() if self.live is not None else {}
        snap = self.monitor.snapshot()
        conditions = list(live.pop("conditions", []))
        since = snap.get("since_last_frame_s")
        waiting = live.pop("source_waiting", False)
        if self.stall_s is not None and since is not None and since > self.stall_s and snap["state"] != STOPPED and not waiting:
            conditions.append(f"no frame for {since:.1f} s")
        status = {**snap, **live, **self.extra, "conditions": conditions, "pid": os.getpid(), **clock_stamp()}
        status["status_interval_s"] = self.interval_s
        if conditions and status["state"] in (NOMINAL, STARTING):
            status["state"] = DEGRADED  # a missing camera, a full disk, a stall: never NOMINAL
        status["status_writes"] = {"written": self.writes, "failed": self.write_failures, "error": self.write_error, "since": self.write_error_since}
        return status

    def write(self, status: dict | None = None) -> bool:
        """status.json now; False (counted, kept for the next status) when it could not be written."""
        status = status if status is not None else self.snapshot()
        try:
            write_status(self.folder, status)
        except Exception as exc:  # a full disk, a vanished folder: the loop goes on and says so later
            self.write_failures += 1
            if self.write_error is None:
                self.write_error = write_error_text(exc)
                self.write_error_since = time.time()
                sys.stderr.write(f"warning: cannot write {STATUS_FILE}: {self.write_error}; the service goes on\n")
            return False
        self.writes += 1
        if self.write_error is not None:
            sys.stderr.write(f"note: {STATUS_FILE} written again after {self.write_failures} failed writes ({self.write_error})\n")
            self.write_error, self.write_error_since = None, None  # the counter stays: the status says how many failed
        return True

    def beat(self, status: dict | None = None) -> dict:
        status = status if status is not None else self.snapshot()
        unwritten = f"; {STATUS_FILE} not written: {self.write_error}" if self.write_error else ""  # said where no disk is needed
        self.notifier.status(f"{status['state']}: {status['frames']} frames, {status['misses']} misses{unwritten}")
        if self._udp is not None:
            try:
                self._udp[0].sendto(json.dumps(status).encode()[:60_000], self._udp[1])
            except OSError:
                pass  # the listener is the vehicle's business; the service keeps running
        return status

    def publish(self) -> dict:
        status = self.snapshot()
        self.write(status)
        self.beat(status)
        return status

    def _files(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                status = self.snapshot()
                self.write(status)
                if self.on_status is not None:
                    self.on_status(status)
            except Exception:  # noqa: S110 - this loop must outlive anything a status can raise
                pass

    def _beats(self) -> None:
        orphaned = False
        while not self._stop.wait(self.interval_s):
            try:
                self.beat()
                if self.gc is not None:
                    self.gc.collect()
            except Exception:  # noqa: S110 - the heartbeat must outlive anything a status can raise
                pass
            if self.parent and not orphaned and os.getppid() != self.parent and self.on_orphaned is not None:
                orphaned = True
                self.on_orphaned()
            if self.follow is not None:
                try:
                    self.follow()
                except Exception as exc:  # noqa: BLE001 - following the store must never end the service
                    sys.stderr.write(f"warning: cannot read the release store: {type(exc).__name__}: {exc}\n")

    def __enter__(self) -> StatusReporter:
        self.publish()
        self._file_thread.start()
        self._beat_thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._file_thread.join(timeout=5)
        self._beat_thread.join(timeout=5)
        if self._udp is not None:
            self._udp[0].close()
