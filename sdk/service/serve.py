"""`python -m sdk serve --release DIR --status-dir DIR`: the pipeline as a long-running service.

It runs until the source ends or SIGTERM, tells its manager (systemd, or the project's own
supervisor: same protocol) READY after the first frame and WATCHDOG=1 only from the frame path,
so a loop that stops producing frames is restarted by its manager. status.json (atomic) is
written every `status_interval_s` by a separate thread, so a stall shows as a growing
`since_last_frame_s`; optionally the same status goes to the vehicle as a UDP datagram.
Exit codes: 0 clean end or SIGTERM, 1 an error (model load, broken stage), which makes the
manager restart it and, during a trial activation, the deploy roll back.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path

from sdk.errors import SdkError
from sdk.runtime.runner import PipelineRunner
from sdk.service.files import STATUS_FILE, write_json_atomic
from sdk.service.health import HealthMonitor
from sdk.service.notify import Notifier
from sdk.service.realtime import GcOutOfTheLoop, apply_realtime


def write_status(folder: Path, status: dict) -> None:
    write_json_atomic(folder / STATUS_FILE, status)


class StatusReporter:
    """A thread that publishes the monitor's snapshot (file, manager STATUS, UDP) every interval."""

    def __init__(self, folder: Path, monitor: HealthMonitor, notifier: Notifier, interval_s: float, extra: dict, udp: str | None, live=None) -> None:
        self.folder, self.monitor, self.notifier, self.interval_s, self.extra = folder, monitor, notifier, interval_s, extra
        self.live = live  # counters that change while running (the source's drops, corrupt frames, disconnects)
        self._udp = None
        if udp:
            host, _, port = udp.rpartition(":")
            self._udp = (socket.socket(socket.AF_INET, socket.SOCK_DGRAM), (host, int(port)))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="status", daemon=True)
        self.gc: GcOutOfTheLoop | None = None

    def publish(self) -> dict:
        live = self.live() if self.live is not None else {}
        status = {**self.monitor.snapshot(), **live, **self.extra, "pid": os.getpid(), "time": time.time()}
        write_status(self.folder, status)
        self.notifier.status(f"{status['state']}: {status['frames']} frames, {status['misses']} misses")
        if self._udp is not None:
            try:
                self._udp[0].sendto(json.dumps(status).encode()[:60_000], self._udp[1])
            except OSError:
                pass  # the listener is the vehicle's business; the service keeps running
        return status

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.publish()
            if self.gc is not None:
                self.gc.collect()

    def __enter__(self) -> StatusReporter:
        self.publish()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        if self._udp is not None:
            self._udp[0].close()


def exec_committed(root: Path, status_dir: Path, frames: int | None) -> int:
    """The service's entry point (systemd's ExecStart): recover the store, then become the committed
    release's own `serve` (same PID, so the manager's notify socket and watchdog carry over).
    A trial that can no longer finish is rolled back first: an unchecked release never starts here."""
    from sdk.errors import TargetError
    from sdk.store import ReleaseStore

    store = ReleaseStore(root)
    with store.locked():
        folder = store.committed_dir()
    if folder is None:
        raise TargetError(f"{root}: no release has passed its health check on this device", hint="deploy one first")
    env_python = store.env_dir(folder.name) / "bin" / "python"
    python = str(env_python) if env_python.exists() else sys.executable
    argv = [python, "-B", "-m", "sdk", "serve", "--release", str(folder), "--status-dir", str(status_dir)]
    argv += ["--frames", str(frames)] if frames else []
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}  # the release's own sdk
    os.chdir(folder)
    os.execve(python, argv, env)
    return 1  # not reached


def serve(argv: list[str]) -> int:
    from sdk.runtime.cli import load_release

    parser = argparse.ArgumentParser(prog="python -m sdk serve", description="Run a release as a service.")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--release", type=Path, help="this release folder")
    where.add_argument("--root", type=Path, help="a release store: recover it, then serve its committed release")
    parser.add_argument("--status-dir", type=Path, required=True)
    parser.add_argument("--frames", type=int, default=None, help="stop after N frames (tests)")
    args = parser.parse_args(argv)
    if args.root is not None:
        return exec_committed(args.root, args.status_dir, args.frames)
    status_dir = args.status_dir.resolve()
    status_dir.mkdir(parents=True, exist_ok=True)
    notifier = Notifier()
    base = {"release": None, "last_error": None}
    try:
        release_id, pipeline, artifacts = load_release(args.release)
    except SdkError as exc:
        write_status(status_dir, {"state": "FAILED", "last_error": exc.message, "pid": os.getpid(), "time": time.time()})
        raise
    service = pipeline.spec.service
    applied, warnings = apply_realtime(service)
    for warning in warnings:
        sys.stderr.write(f"warning: {warning}\n")
    monitor = HealthMonitor(pipeline.spec.budgets.deadline_ms, service.degraded)
    extra = {**base, "release": release_id, "pipeline": pipeline.spec.name, "realtime": applied, "warnings": warnings}
    ping = {"next": 0.0, "ready": False}
    interval = notifier.watchdog_interval_s or service.watchdog_s / 2

    def on_frame(count: int) -> None:  # the frame path: the only place the watchdog is fed
        now = time.monotonic()
        if not ping["ready"]:
            ping["ready"] = True
            notifier.ready(f"{pipeline.spec.name}: frames flowing")
        if now >= ping["next"]:
            ping["next"] = now + interval
            notifier.watchdog()

    runner = PipelineRunner(
        pipeline, artifacts, status_dir / "output", max_frames=args.frames, on_frame=on_frame, require_jsonl=False, monitor=monitor
    )

    def on_term(*_: object) -> None:
        notifier.stopping()
        runner.stop()

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    def source_counters() -> dict:
        counters = runner.counters
        if counters is None:
            return {}
        return {"dropped": counters.dropped, "corrupt_frames": counters.corrupt, "disconnects": counters.disconnects}

    reporter = StatusReporter(status_dir, monitor, notifier, service.status_interval_s, extra, service.heartbeat_udp, source_counters)
    with reporter, GcOutOfTheLoop() as gc_guard:
        reporter.gc = gc_guard
        try:
            result = runner.run()
        except BaseException as exc:  # any end but a normal one is FAILED in status.json, never a stale NOMINAL
            monitor.stop()
            message = exc.message if isinstance(exc, SdkError) else f"{type(exc).__name__}: {exc}"
            extra.update(state="FAILED", last_error=message)
            reporter.publish()
            raise
        monitor.stop()
        extra["state"] = "STOPPED"  # the run ended (the stream ended, or SIGTERM): no longer NOMINAL
        extra["last_error"] = result.last_error
        extra["stage_errors"] = result.stage_errors
    reporter.publish()
    notifier.close()
    return 0


def main(argv: list[str]) -> int:
    try:
        return serve(argv)
    except SdkError as exc:
        sys.stderr.write(f"error: {exc.message}\nhint: {exc.hint}\n")
        return exc.exit_code
