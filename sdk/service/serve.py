"""`python -m sdk serve --release DIR --status-dir DIR`: the pipeline as a long-running service.

It runs until the source ends or SIGTERM, tells its manager (systemd, or the project's own
supervisor: same protocol) READY after the first frame and WATCHDOG=1 only from the frame path,
so a loop that stops producing frames is restarted by its manager. status.json (atomic) is
written every `status_interval_s` by a thread of its own that outlives write errors, and the
heartbeat (manager STATUS, UDP to the vehicle) by another, so a full disk does not silence it.
It holds `runtime.lock` in DIR for its whole life (one runtime per folder) and stops by itself
when its supervisor is gone. SIGTERM at any moment, model load included, is a clean stop.
Exit codes: 0 clean end (a recording ended, --frames reached) or SIGTERM; 1 an error (model load,
broken stage, a live camera's stream that ended), which makes the manager restart it and, during
a trial activation, the deploy roll back.
"""

from __future__ import annotations

import argparse
import faulthandler
import os
import signal
import sys
import threading
import time
from pathlib import Path

from sdk.errors import SdkError
from sdk.runtime.health import HealthMonitor
from sdk.runtime.runner import PipelineRunner
from sdk.service.files import OUTPUT_DIR
from sdk.service.notify import Notifier
from sdk.service.realtime import GcOutOfTheLoop, apply_realtime
from sdk.service.runtime_log import RuntimeLog
from sdk.service.status_reporter import StatusReporter, write_status
from sdk.service.unit import EXIT_OTHER_PIPELINE, EXIT_RELEASE_CHANGED

UNIT_DEPLOY_WAIT_S = 90.0  # the unit's start waits this long for a deploy holding the target (TimeoutStartSec=120)


def exec_committed(root: Path, status_dir: Path, frames: int | None, pipeline: str | None = None) -> int:
    """The service's entry point (systemd's ExecStart): become the release that may start (sdk/store/startable.py: the
    committed release, found by reading and verified byte for byte) as its own `serve` (same PID, so the
    manager's notify socket and watchdog carry over). A trial is never what starts; recovery is done where the
    disk allows and waits (said in the log) where it does not: under the locked-down unit the store is
    read-only (ProtectSystem=strict, decision 0111), and a full disk is exactly what a crash may leave.
    With `pipeline`, only that pipeline's release starts: another pipeline's committed release exits
    EXIT_OTHER_PIPELINE, which systemd does not restart. The service lock is taken first and kept across
    the exec: systemd's service and `sdk start` exclude each other like two supervisors do; and no start
    happens beside a deploy's trial or measured run (the deploy lock, waited for a bounded time)."""
    from sdk.errors import TargetError
    from sdk.service.instance import SERVICE_LOCK, HeldLock, holder
    from sdk.store.lease import deploy_excluded
    from sdk.store.objects import ReleaseStore
    from sdk.store.startable import resolve_startable

    status_dir = status_dir.resolve()
    lock = HeldLock.acquire(status_dir / SERVICE_LOCK, "supervisor", {"manager": "systemd"})
    if lock is None:
        who = holder(status_dir / SERVICE_LOCK, "supervisor") or {}
        raise TargetError(f"already running: pid {who.get('pid')} holds {status_dir / SERVICE_LOCK}", hint="sdk stop first")
    store = ReleaseStore(root)
    with deploy_excluded(store.root, None, UNIT_DEPLOY_WAIT_S):
        chosen = resolve_startable(store)
    for note in chosen.notes:
        sys.stderr.write(f"note: {note}\n")
    folder = chosen.folder
    if pipeline is not None:
        _require_pipeline(folder, pipeline)
    from sdk.release import release_command

    args = ["serve", "--release", str(folder), "--status-dir", str(status_dir)] + (["--frames", str(frames)] if frames else [])
    launch = release_command(folder, args)
    os.chdir(launch.cwd)
    lock.inheritable()
    os.execve(launch.argv[0], launch.argv, launch.env)  # the release's own sdk, same PID (the manager's socket and watchdog)
    return 1  # not reached


class OtherPipeline(SdkError):
    """The store's committed release runs another pipeline than the unit's: not restarted (decision 0110)."""

    exit_code = EXIT_OTHER_PIPELINE


def committed_pipeline(folder: Path) -> str | None:
    """The `name:` of a release's pipeline file, read without pydantic (the agent's bare Python)."""
    from sdk.release import ReleaseManifest, pipeline_name_of

    try:
        return pipeline_name_of((folder / ReleaseManifest.load(folder).pipeline).read_text())
    except (OSError, ValueError, SdkError):
        return None


def _require_pipeline(folder: Path, pipeline: str) -> None:
    name = committed_pipeline(folder)
    if name != pipeline:
        raise OtherPipeline(
            f"the committed release {folder.name} runs pipeline {name!r}, not {pipeline!r}: this unit starts {pipeline!r} only",
            hint=f"deploy {pipeline} again to run it, or disable this unit (sudo systemctl disable --now perception-{pipeline})",
        )


class Stop:
    """SIGTERM and SIGINT at any moment, from the first line on: a flag and a reason, no traceback."""

    def __init__(self) -> None:
        self.requested = False
        self.reason: str | None = None
        self.release_changed = False  # the store's committed release is another: exit EXIT_RELEASE_CHANGED
        self.runner: PipelineRunner | None = None
        self.notifier: Notifier | None = None

    def __call__(self, signum: int | None = None, _frame: object = None, reason: str | None = None) -> None:
        if not self.requested:
            self.reason = reason or (f"stopped by {signal.Signals(signum).name}" if signum else "stopped")
            parent = os.environ.get("SDK_SUPERVISOR_PID")
            if signum == signal.SIGTERM and parent and os.getppid() != int(parent):
                self.reason = f"the supervisor (pid {parent}) is gone: stopped with it"
        self.requested = True
        if self.notifier is not None:
            self.notifier.stopping()
        if self.runner is not None:
            self.runner.stop()


def serve(argv: list[str]) -> int:
    stop = Stop()
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    for ignored in IGNORED_SIGNALS:  # their default would end the runtime without a word
        signal.signal(ignored, _ignored)
    faulthandler.enable(all_threads=True)  # a crash in native code leaves its traceback in service.log
    from sdk.release import load_release

    parser = argparse.ArgumentParser(prog="python -m sdk serve", description="Run a release as a service.")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--release", type=Path, help="this release folder")
    where.add_argument("--root", type=Path, help="a release store: recover it, then serve its committed release")
    parser.add_argument("--status-dir", type=Path, required=True)
    parser.add_argument("--frames", type=int, default=None, help="stop after N frames (tests)")
    parser.add_argument("--pipeline", default=None, help="with --root: start only this pipeline's committed release")
    args = parser.parse_args(argv)
    if args.root is not None:
        return exec_committed(args.root, args.status_dir, args.frames, args.pipeline)
    status_dir = args.status_dir.resolve()
    status_dir.mkdir(parents=True, exist_ok=True)
    lock = _runtime_lock(status_dir)
    try:
        return _serve(args, status_dir, stop, load_release)
    finally:
        lock.release()


IGNORED_SIGNALS = (signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)


def _ignored(signum: int, _frame: object = None) -> None:
    sys.stderr.write(f"note: {signal.Signals(signum).name} ignored by the runtime (its supervisor handles SIGHUP: reload)\n")


def _runtime_lock(status_dir: Path):
    from sdk.errors import TargetError
    from sdk.service.instance import RUNTIME_LOCK, HeldLock, holder

    lock = HeldLock.acquire(status_dir / RUNTIME_LOCK, "runtime")
    if lock is None:  # two runtimes would write the same files
        who = holder(status_dir / RUNTIME_LOCK, "runtime") or {}
        raise TargetError(f"another runtime (pid {who.get('pid')}) is running in {status_dir}", hint="sdk stop first")
    return lock


def _failed(status_dir: Path, message: str) -> None:
    try:
        write_status(status_dir, {"state": "FAILED", "reason": message, "last_error": message, "pid": os.getpid(), "time": time.time()})
    except OSError:
        pass  # the supervisor writes the end of a runtime it saw die; the log has the error


def _serve(args, status_dir: Path, stop: Stop, load_release) -> int:
    notifier = Notifier()
    stop.notifier = notifier
    try:
        from sdk.store.startable import allowed_to_run

        allowed_to_run(args.release)  # only checked bytes of a release that may run here (sdk/store/startable.py)
        release_id, pipeline, artifacts = load_release(args.release)
    except SdkError as exc:
        _failed(status_dir, exc.message)
        raise
    service = pipeline.spec.service
    applied, warnings = apply_realtime(service)
    for warning in warnings:
        sys.stderr.write(f"warning: {warning}\n")
    monitor = HealthMonitor(pipeline.spec.budgets.deadline_ms, service.degraded)
    extra = {"release": release_id, "pipeline": pipeline.spec.name, "realtime": applied, "warnings": warnings, "last_error": None, "reason": None}
    feeds = WatchdogFeeds(notifier, pipeline.spec.name, notifier.watchdog_interval_s or service.watchdog_s / 2)
    runner = PipelineRunner(
        pipeline,
        artifacts,
        status_dir / OUTPUT_DIR,
        max_frames=args.frames,
        on_frame=feeds.on_frame,
        require_jsonl=False,
        monitor=monitor,
        retention=service.retention,
        on_idle=feeds.on_idle,
        on_end=notifier.stopping,  # from here the manager applies stop_timeout_s, not the watchdog (closing takes time)
        live_view="pipeline",  # the pipeline's foxglove sink is the service's live view
    )
    feeds.runner = stop.runner = runner
    if stop.requested:
        runner.stop()
    log = RuntimeLog(runner)
    log.started(pipeline, release_id)
    reporter = StatusReporter(
        status_dir,
        monitor,
        notifier,
        service.status_interval_s,
        extra,
        service.heartbeat_udp,
        lambda: live_status(runner),
        stall_s=feeds.interval,
        on_orphaned=lambda: _orphaned(stop, service.stop_timeout_s),
        follow=_follower(args.release, stop),
        on_status=log,
    )
    with reporter, GcOutOfTheLoop() as gc_guard:
        reporter.gc = gc_guard
        try:
            result = runner.run()
        except BaseException as exc:  # any end but a normal one is FAILED in status.json, never a stale NOMINAL
            monitor.stop()
            message = exc.message if isinstance(exc, SdkError) else f"{type(exc).__name__}: {exc}"
            extra.update(state="FAILED", last_error=message, reason=message)
            reporter.publish()
            log.ended(extra, monitor.frames)
            raise
        monitor.stop()
        live_ended = _record_the_end(result, runner, stop, args.frames, extra)
    reporter.publish()
    log.ended(extra, result.frames)
    notifier.close()
    if live_ended:
        sys.stderr.write(f"error: {extra['reason']}\n")
        return 1
    if stop.release_changed:
        sys.stderr.write(f"note: {stop.reason}\n")
        return EXIT_RELEASE_CHANGED  # the manager starts the release that may start now
    return 0


class WatchdogFeeds:
    """The manager's READY and WATCHDOG=1, fed from the frame path only (and while a camera reconnects on schedule)."""

    def __init__(self, notifier: Notifier, name: str, interval: float) -> None:
        self.notifier, self.name, self.interval = notifier, name, interval
        self.ready, self.next = False, 0.0
        self.runner: PipelineRunner | None = None

    def on_frame(self, count: int) -> None:
        now = time.monotonic()
        if not self.ready:
            self.ready = True
            self.notifier.ready(f"{self.name}: frames flowing")
        if now >= self.next:
            self.next = now + self.interval
            self.notifier.watchdog()

    def on_idle(self) -> None:  # no frame, but a camera being reconnected on schedule: alive, so the watchdog is fed
        stream = self.runner.stream if self.runner is not None else None
        if stream is None or not stream.reconnect_on_schedule():
            return  # a reconnect that stopped trying (an open() that hangs) is a hang: the watchdog will see it
        if not self.ready:
            self.ready = True
            self.notifier.ready(f"{self.name}: started, {stream.condition()}")
        self.notifier.watchdog()


def live_status(runner: PipelineRunner) -> dict:
    """What changes while the service runs: the sources' counters and conditions, each output's frames written."""
    counters = runner.counters
    live: dict = {"conditions": []}
    if counters is not None:
        live.update(dropped=counters.dropped, corrupt_frames=counters.corrupt, lost_frames=counters.lost, disconnects=counters.disconnects)
        live.update(reconnect_attempts=counters.reconnect_attempts, corrupt_last=counters.corrupt_last, lost_last=counters.lost_last)
        if counters.out_of_order:  # a stamped recording (mcap://, rosbag2://) whose stamps went back
            live.update(out_of_order_stamps=counters.out_of_order, out_of_order_last=counters.out_of_order_last)
    stream = runner.stream
    source = stream.condition() if stream is not None else None
    if source is not None:
        live["conditions"].append(source)
        live["source_waiting"] = True  # no frames because of the camera: said above, not a stall of the runtime
    sinks = runner.sinks
    if sinks is not None:  # each output's frames written and not written (and why), exactly
        live["outputs"] = sinks.describe()
        live["conditions"] += sinks.conditions()
    return live


def _orphaned(stop: Stop, stop_timeout_s: float) -> None:
    """The supervisor died and no SIGTERM came (or it was lost): stop, and do not outlive the bound."""
    stop(reason=f"the supervisor (pid {os.environ.get('SDK_SUPERVISOR_PID')}) is gone: stopped with it")
    threading.Timer(stop_timeout_s, lambda: os.kill(os.getpid(), signal.SIGKILL)).start()


def _follower(release: Path, stop: Stop):
    """The store's committed release is no longer this one (a rollback, a commit): give way (sdk/service/follow.py)."""
    from sdk.service.follow import StoreFollower

    follower = StoreFollower(release)

    def follow() -> None:
        why = follower.gives_way()
        if why is not None and not stop.requested:
            stop.release_changed = True
            stop(reason=why)

    return follow


def _record_the_end(result, runner: PipelineRunner, stop: Stop, frames: int | None, extra: dict) -> bool:
    """How the run ended, into the status: a live camera that stopped is a fault (the manager restarts the runtime),
    a recording that ended is not. True for the fault."""
    stream = runner.stream
    streams = getattr(stream, "streams", None) or ([stream] if stream is not None else [])  # several cameras: each
    ended = [s.name for s in streams if s.reader.live and s.source_ended]
    live_ended = bool(ended) and not stop.requested
    extra["last_error"] = result.last_error
    extra["stage_errors"] = result.stage_errors
    if live_ended:
        extra.update(state="FAILED", reason=f"the live source ended: {', '.join(ended)}")
        extra["last_error"] = extra["last_error"] or extra["reason"]
    else:
        extra["state"] = "STOPPED"  # the run ended (the stream ended, or SIGTERM): no longer NOMINAL
        extra["reason"] = stop.reason or ("frames limit reached" if frames and result.frames >= frames else "the source ended")
    return live_ended
