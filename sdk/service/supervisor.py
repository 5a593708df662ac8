"""`python -m sdk supervise --release DIR --status-dir DIR`: systemd's job where there is no systemd.

In a container or on the simulated target there is no service manager, so this small one does
what the unit file asks of systemd: it starts `python -m sdk serve`, listens on the same
notification protocol (READY, WATCHDOG=1), kills a child whose watchdog pings stop, restarts a
child that failed with a doubling backoff, gives up after `max_restarts` within the window, and
on SIGTERM passes SIGTERM on and waits `stop_timeout_s` before SIGKILL. A clean exit (the source
ended) is not restarted, like Restart=on-failure.
"""

from __future__ import annotations

import argparse
import os
import select
import signal
import socket
import subprocess
import sys
import time
from collections import deque
from pathlib import Path

from sdk.service.files import LOG_FILE, PID_FILE, SUPERVISOR_FILE, write_json_atomic

START_TIMEOUT_S = 120.0  # READY must come within this (model load included), like TimeoutStartSec
MAX_BACKOFF_S = 30.0


class Supervisor:
    def __init__(self, release: Path, status_dir: Path, service, frames: int | None = None) -> None:
        self.release = release
        self.status_dir = status_dir
        self.service = service
        self.frames = frames
        self.state = "starting"
        self.restarts: deque[float] = deque()
        self.total_restarts = 0
        self.last_exit: int | None = None
        self.last_reason: str | None = None
        self.child: subprocess.Popen | None = None
        self._stopping = False

    def command(self) -> list[str]:
        argv = [sys.executable, "-B", "-m", "sdk", "serve", "--release", str(self.release), "--status-dir", str(self.status_dir)]
        return argv + (["--frames", str(self.frames)] if self.frames else [])

    def _write(self) -> None:
        state = {
            "state": self.state,
            "pid": os.getpid(),
            "child_pid": self.child.pid if self.child and self.child.poll() is None else None,
            "restarts": self.total_restarts,
            "last_exit": self.last_exit,
            "last_reason": self.last_reason,
            "release": str(self.release),
            "time": time.time(),
        }
        write_json_atomic(self.status_dir / SUPERVISOR_FILE, state)

    def stop(self, *_: object) -> None:
        self._stopping = True
        if self.child is not None and self.child.poll() is None:
            self.child.send_signal(signal.SIGTERM)

    def run(self) -> int:
        self.status_dir.mkdir(parents=True, exist_ok=True)
        (self.status_dir / PID_FILE).write_text(f"{os.getpid()}\n")
        signal.signal(signal.SIGTERM, self.stop)
        signal.signal(signal.SIGINT, self.stop)
        # An abstract socket: no file to clean up, no 108-byte path limit.
        address = f"@sdk-supervisor-{os.getpid()}"
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        listener.bind("\0" + address[1:])
        env = {**os.environ, "NOTIFY_SOCKET": address, "WATCHDOG_USEC": str(int(self.service.watchdog_s * 1e6))}
        try:
            while True:
                code, reason = self._run_child(listener, env)
                self.last_exit, self.last_reason = code, reason
                if self._stopping or code == 0:
                    self.state = "stopped"
                    return 0
                now = time.monotonic()
                self.restarts.append(now)
                while self.restarts and now - self.restarts[0] > self.service.restart_window_s:
                    self.restarts.popleft()
                if len(self.restarts) > self.service.max_restarts:
                    self.state = "failed"
                    return 1
                self.total_restarts += 1
                self.state = "restarting"
                self._write()
                delay = min(self.service.restart_backoff_s * 2 ** (len(self.restarts) - 1), MAX_BACKOFF_S)
                deadline = time.monotonic() + delay
                while not self._stopping and time.monotonic() < deadline:
                    time.sleep(0.05)
                if self._stopping:
                    self.state = "stopped"
                    return 0
        finally:
            listener.close()
            self._write()
            (self.status_dir / PID_FILE).unlink(missing_ok=True)

    def _run_child(self, listener: socket.socket, env: dict) -> tuple[int, str]:
        with (self.status_dir / LOG_FILE).open("ab") as log:
            self.child = subprocess.Popen(self.command(), cwd=self.release, env=env, stdout=log, stderr=log, start_new_session=True)
        self.state = "starting"
        self._write()
        ready = False
        last_ping = time.monotonic()
        stop_sent_at: float | None = None
        while True:
            code = self.child.poll()
            if code is not None:
                if self._stopping:
                    return code, "stopped"
                return code, "exited" if code == 0 else f"failed with status {code}"
            if self._stopping and stop_sent_at is None:
                stop_sent_at = time.monotonic()
            if stop_sent_at is not None and time.monotonic() - stop_sent_at > self.service.stop_timeout_s:
                self.child.kill()  # did not stop within the bound
                self.child.wait()
                return -9, f"killed: no exit within stop_timeout_s {self.service.stop_timeout_s:g}"
            readable, _, _ = select.select([listener], [], [], 0.1)
            if readable:
                message = listener.recv(4096).decode(errors="replace").splitlines()
                if "READY=1" in message and not ready:
                    ready = True
                    self.state = "running"
                    self._write()
                if "WATCHDOG=1" in message or "READY=1" in message:
                    last_ping = time.monotonic()
            limit = self.service.watchdog_s if ready else START_TIMEOUT_S
            if stop_sent_at is None and time.monotonic() - last_ping > limit:
                self.child.kill()  # hung: SIGTERM would wait on the very loop that stopped
                self.child.wait()
                return -9, "watchdog: no frame for " + f"{limit:g} s" if ready else f"not ready within {limit:g} s"


def supervise(argv: list[str]) -> int:
    from sdk.runtime.cli import load_release

    parser = argparse.ArgumentParser(prog="python -m sdk supervise")
    parser.add_argument("--release", type=Path, required=True)
    parser.add_argument("--status-dir", type=Path, required=True)
    parser.add_argument("--frames", type=int, default=None, help="each run stops after N frames (tests)")
    args = parser.parse_args(argv)
    release = args.release.resolve()  # pinned at start: a later deploy does not swap a running service
    _, pipeline, _ = load_release(release)
    return Supervisor(release, args.status_dir.resolve(), pipeline.spec.service, args.frames).run()
