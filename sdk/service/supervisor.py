"""`python -m sdk supervise --release DIR --status-dir DIR`: systemd's job where there is no systemd.

In a container or on the simulated target there is no service manager, so this small one does
what the unit file asks of systemd: it starts `python -m sdk serve`, listens on the same
notification protocol (READY, WATCHDOG=1), kills a child whose watchdog pings stop, restarts a
child that failed with a doubling backoff, gives up after `max_restarts` within the window, and
on SIGTERM passes SIGTERM on and waits `stop_timeout_s` before SIGKILL. A clean exit (a replay
ended, or --frames reached) is not restarted, like Restart=on-failure.

One per state folder, by construction: it holds `service.lock` (sdk/service/instance.py) from its
first moment to its last, and a second one exits with EXIT_ALREADY_RUNNING before it touches
anything. Its runtime dies with it: the kernel sends the runtime SIGTERM when the supervisor dies
(PR_SET_PDEATHSIG), the runtime also watches its parent, and a runtime left over all the same is
stopped (verified by its own lock) before a new one starts. Nothing it writes can kill it: a
state file that cannot be written (a full disk) is counted, logged and written again later.
Every end of a runtime is in status.json and supervisor.json with its reason; the runtime's output
and the supervisor's own crash traceback go to service.log (sdk/service/logfile.py, bounded).
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import os
import select
import signal
import socket
import subprocess
import sys
import time
import traceback
from collections import deque
from pathlib import Path

from sdk.service.files import LOG_FILE, PID_FILE, STATUS_FILE, SUPERVISOR_FILE, clock_stamp, read_json, write_error_text, write_json_atomic
from sdk.service.follow import FollowsTheStore
from sdk.service.instance import RUNTIME_LOCK, SERVICE_LOCK, HeldLock, holder, start_ticks, stop_holder
from sdk.service.live import LiveState
from sdk.service.logfile import RotatingLog
from sdk.service.unit import EXIT_RELEASE_CHANGED, MAX_BACKOFF_S

START_TIMEOUT_S = 120.0  # READY must come within this (model load included), like TimeoutStartSec
EXIT_ALREADY_RUNNING = 75  # EX_TEMPFAIL: another supervisor holds the lock; this one changed nothing
EXIT_CRASHED = 70  # EX_SOFTWARE: the supervisor itself failed (its traceback is in service.log)
PR_SET_PDEATHSIG = 1
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT)  # a clean stop, its signal recorded as the reason
IGNORED_SIGNALS = (signal.SIGUSR1, signal.SIGUSR2, signal.SIGALRM, signal.SIGVTALRM, signal.SIGPROF, signal.SIGIO, signal.SIGPWR)
TERMINAL = ("STOPPED", "FAILED")
DEFAULT_LOG_MB, DEFAULT_LOG_KEEP = 16.0, 4  # until the release's own retention is read


def die_with_parent(parent: int, signum: int = signal.SIGTERM):
    """A preexec_fn: the kernel sends `signum` to the child when `parent` dies; a parent already gone is seen at once."""
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)

    def preexec() -> None:
        libc.prctl(PR_SET_PDEATHSIG, signum, 0, 0, 0)
        if os.getppid() != parent:  # it died between fork and prctl: no signal will come
            os._exit(1)

    return preexec


def signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


class Supervisor(FollowsTheStore):
    def __init__(self, release: Path | None, status_dir: Path, service=None, frames: int | None = None, root: Path | None = None) -> None:
        self.root = root  # a store: each (re)start runs the release that may start then (sdk/store/startable.py)
        self.release = release  # the release it runs now (with `root`: chosen before each start)
        self.notes: list[str] = []  # what the last choice of release said (damage, a fallback, a repair that waits)
        self._reload = False
        self.status_dir = status_dir
        self.service = service
        self.frames = frames
        self.state = "starting"
        self.restarts: deque[float] = deque()
        self.total_restarts = 0
        self.last_exit: int | None = None
        self.last_reason: str | None = None
        self.last_error: str | None = None
        self.child: subprocess.Popen | None = None
        self.log: RotatingLog | None = None
        self.state_write_failures = 0
        self.state_write_error: str | None = None
        self.source: dict | None = None  # what the service does with its source (sdk/service/plan.py)
        self.heartbeat: tuple[str, float, int] | None = None  # the runtime's last STATUS= line, when, and its pid
        self.live: LiveState | None = None  # answers `sdk status` and `sdk start` from the main loop (sdk/service/live.py)
        self._stopping = False
        self._switching = False  # the child was stopped to give way to another release (SIGHUP)
        self.stop_reason = "stopped"

    def command(self) -> list[str]:
        from sdk.release import release_command

        args = ["serve", "--release", str(self.release), "--status-dir", str(self.status_dir)]
        return release_command(self.release, args + (["--frames", str(self.frames)] if self.frames else [])).argv

    def note(self, text: str) -> None:
        if self.log is not None:
            self.log.line(text)

    def _record(self) -> dict:
        return {
            "state": self.state,
            "pid": os.getpid(),
            "start": start_ticks(os.getpid()),
            "child_pid": self.child.pid if self.child and self.child.poll() is None else None,
            "restarts": self.total_restarts,
            "last_exit": self.last_exit,
            "last_reason": self.last_reason,
            "last_error": self.last_error,
            "release": str(self.release) if self.release is not None else None,
            "root": str(self.root) if self.root is not None else None,
            "notes": self.notes,
            "source": self.source,
            "state_write_failures": self.state_write_failures,
            **clock_stamp(),
        }

    def describe(self) -> dict:
        """The state in memory (sdk/service/live.py): what supervisor.json says when it can be written, why it
        cannot, and the runtime's last heartbeat (its STATUS= line) with its age."""
        beat = None
        if self.heartbeat is not None:
            beat = {"status": self.heartbeat[0], "age_s": round(time.monotonic() - self.heartbeat[1], 3), "pid": self.heartbeat[2]}
        interval = self.service.status_interval_s if self.service is not None else None
        return {**self._record(), "live": True, "state_write_error": self.state_write_error, "heartbeat": beat, "status_interval_s": interval}

    def _write(self) -> bool:
        state = self._record()
        try:
            write_json_atomic(self.status_dir / SUPERVISOR_FILE, state)
        except OSError as exc:  # a full disk must not end the service: counted, said, tried again
            self.state_write_failures += 1
            if self.state_write_error is None:
                self.state_write_error = write_error_text(exc)
                self.note(f"cannot write {SUPERVISOR_FILE} ({self.state_write_error}); the service goes on and tries again")
            return False
        if self.state_write_error is not None:
            self.note(f"{SUPERVISOR_FILE} written again after {self.state_write_failures} failed writes ({self.state_write_error})")
            self.state_write_error = None
        return True

    def stop(self, signum: int | None = None, _frame: object = None) -> None:
        if not self._stopping and signum is not None:
            self.stop_reason = f"stopped by {signal.Signals(signum).name}"
        self._stopping = True
        if self.child is not None and self.child.poll() is None:
            self.child.send_signal(signal.SIGTERM)

    def reload(self, *_: object) -> None:
        """SIGHUP: read the store again; a child running another release than the one to start now gives way."""
        self._reload = True

    def ignore(self, signum: int, _frame: object = None) -> None:
        self.note(f"{signal.Signals(signum).name} ignored (SIGHUP reloads, SIGTERM/SIGINT/SIGQUIT stop)")

    def _signals(self) -> None:
        """Every signal whose default would end the supervisor without a word has a meaning (sdk/service/supervisor.py)."""
        for signum in STOP_SIGNALS:
            signal.signal(signum, self.stop)
        signal.signal(signal.SIGHUP, self.reload)
        for signum in IGNORED_SIGNALS:
            signal.signal(signum, self.ignore)

    def run(self) -> int:
        """Take the lock or leave; then supervise until stopped, done or given up. The lock is released
        last, when everything (the runtime's end included) is written."""
        self._signals()
        self.status_dir.mkdir(parents=True, exist_ok=True)
        lock = HeldLock.acquire(self.status_dir / SERVICE_LOCK, "supervisor", {"release": str(self.release)})
        if lock is None:
            who = holder(self.status_dir / SERVICE_LOCK, "supervisor") or {}
            sys.stderr.write(f"already running: pid {who.get('pid')} holds {self.status_dir / SERVICE_LOCK}\n")
            return EXIT_ALREADY_RUNNING
        try:
            self.live = LiveState(os.getpid(), self.describe)  # its state without a file: a full disk refuses supervisor.json
        except OSError:
            self.live = None  # its name taken by another process: `sdk status` reads the files, as before
        try:
            (self.status_dir / PID_FILE).unlink(missing_ok=True)  # from an earlier version: a PID, not an identity
            self.log = RotatingLog(self.status_dir / LOG_FILE, int(DEFAULT_LOG_MB * 2**20), DEFAULT_LOG_KEEP)
            self.log.adopt_stdio()
            self._said_last_end()
            self.note(f"supervisor started for {self.release.name if self.release else 'the store ' + str(self.root)}")
            try:
                return self._supervise()
            except BaseException as exc:
                self.state, self.last_reason = "failed", f"supervisor crashed: {type(exc).__name__}: {exc}"
                self.log.write(("".join(traceback.format_exception(exc)) + "\n").encode(errors="replace"))
                self._end_child()
                self._finish_runtime_status(self.last_reason)
                return EXIT_CRASHED
            finally:
                self._write()
                self.note(f"supervisor ends: {self.state} ({self.last_reason})")
        finally:
            if self.live is not None:
                self.live.close()
            lock.release()

    def _load(self) -> None:
        from sdk.release import load_release

        _, pipeline, _ = load_release(self.release)
        self.service = pipeline.spec.service
        from sdk.service.plan import source_plan

        self.source = source_plan(pipeline)
        retention = self.service.retention
        self.log.max_bytes = int(retention.log_max_mb * 2**20)
        self.log.keep = retention.log_keep

    def _prepare(self) -> bool:
        """The release to run (with a store) and its service settings; False when nothing can start."""
        if not self._choose():
            return False
        if self.service is None:
            try:
                self._load()
            except Exception as exc:
                message = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
                self.state, self.last_reason, self.last_error = "failed", f"cannot load the release: {message}", message
                self.note(self.last_reason)
                return False
        return True

    def _supervise(self) -> int:
        if not self._prepare():
            return 1
        # An abstract socket: no file to clean up, no 108-byte path limit.
        address = f"@sdk-supervisor-{os.getpid()}"
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        listener.bind("\0" + address[1:])
        env = {
            **os.environ,
            "NOTIFY_SOCKET": address,
            "WATCHDOG_USEC": str(int(self.service.watchdog_s * 1e6)),
            "SDK_SUPERVISOR_PID": str(os.getpid()),
        }
        try:
            while True:
                self._stop_orphan()
                if self._stopping:
                    self.state, self.last_reason = "stopped", self.stop_reason
                    return 0
                env["WATCHDOG_USEC"] = str(int(self.service.watchdog_s * 1e6))
                code, reason = self._run_child(listener, env)
                self.last_exit, self.last_reason = code, reason
                if self._stopping or code == 0:
                    self.state = "stopped"
                    self.last_reason = self.stop_reason if self._stopping else reason
                    return 0
                if code == EXIT_RELEASE_CHANGED or self._switching:  # it gave way to another release: no failure, no backoff
                    self._switching = False
                    if not self._prepare():
                        return 1
                    continue
                now = time.monotonic()
                self.restarts.append(now)
                while self.restarts and now - self.restarts[0] > self.service.restart_window_s:
                    self.restarts.popleft()
                if len(self.restarts) > self.service.max_restarts:
                    self.state = "failed"
                    given_up = (
                        f"gave up after {len(self.restarts)} failures within {self.service.restart_window_s:g} s "
                        f"(max_restarts {self.service.max_restarts}); last: {reason}"
                    )
                    self.last_reason = given_up
                    self._finish_runtime_status(given_up, force=True)
                    return 1
                self.total_restarts += 1
                self.state = "restarting"
                self._write()
                if not self._prepare():  # a restart runs what may start now (a rollback meanwhile, a damaged file)
                    return 1
                delay = min(self.service.restart_backoff_s * 2 ** (len(self.restarts) - 1), MAX_BACKOFF_S)
                deadline = time.monotonic() + delay
                while not self._stopping and time.monotonic() < deadline:
                    if self.live is None:
                        time.sleep(0.05)
                    elif select.select([self.live], [], [], 0.05)[0]:
                        self.live.answer()
                if self._stopping:
                    self.state = "stopped"
                    return 0
        finally:
            listener.close()

    def _stop_orphan(self) -> None:
        """A runtime that outlived an earlier supervisor (it was frozen when that one died): stopped before
        a new one starts, found by its lock, never by a PID alone."""
        wait = self.service.stop_timeout_s if self.service is not None else 10.0
        stopped = stop_holder(self.status_dir / RUNTIME_LOCK, "runtime", wait, kill_after=True)
        if stopped is not None:
            self.note(f"stopped runtime pid {stopped['pid']} left by an earlier supervisor (stopped: {stopped['stopped']})")

    def _end_child(self) -> None:
        if self.child is not None and self.child.poll() is None:
            self.child.kill()
            self.child.wait()

    def _finish_runtime_status(self, reason: str, force: bool = False) -> None:
        """status.json after the runtime ended: a terminal state with the reason, never a dead PID's NOMINAL."""
        status = read_json(self.status_dir / STATUS_FILE) or {}
        pid = self.child.pid if self.child is not None else status.get("pid")
        mine = status.get("pid") == pid
        if mine and status.get("state") in TERMINAL and not force:
            self.last_error = status.get("last_error") or self.last_error
            return
        last_error = (status.get("last_error") if mine else None) or reason
        state = "STOPPED" if self._stopping and not force else "FAILED"
        ended = {**(status if mine else {"pid": pid}), "state": state, "reason": reason, "last_error": last_error, "time": time.time()}
        ended["ended_by"] = "supervisor"
        self.last_error = last_error
        try:
            write_json_atomic(self.status_dir / STATUS_FILE, ended)
        except OSError as exc:
            self.note(f"cannot write {STATUS_FILE} ({exc.strerror or exc}): the runtime's end ({reason}) is only in this log")

    def _run_child(self, listener: socket.socket, env: dict) -> tuple[int, str]:
        read_end, write_end = os.pipe()
        try:
            self.child = subprocess.Popen(
                self.command(),
                cwd=self.release,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=write_end,
                stderr=write_end,
                start_new_session=True,
                preexec_fn=die_with_parent(os.getpid()),
            )
        finally:
            os.close(write_end)
        output = [read_end]
        self.state = "starting"
        self._write()
        self.note(f"runtime pid {self.child.pid} started")
        try:
            code, reason = self._watch(listener, output)
        finally:
            self._drain(output, until_eof_s=1.0)
            if output:
                os.close(read_end)
        self.note(f"runtime pid {self.child.pid} ended: {reason}")
        self._finish_runtime_status(reason)
        return code, reason

    def _drain(self, output: list[int], until_eof_s: float = 0.0) -> None:
        deadline = time.monotonic() + until_eof_s
        while output:
            readable, _, _ = select.select(output, [], [], max(0.0, deadline - time.monotonic()))
            if not readable:
                return
            data = os.read(output[0], 65536)
            if not data:
                os.close(output.pop())
                return
            self.log.write(data)

    def _watch(self, listener: socket.socket, output: list[int]) -> tuple[int, str]:
        ready = False
        last_ping = time.monotonic()
        stop_sent_at: float | None = None
        last_state_write = time.monotonic()
        while True:
            code = self.child.poll()
            if code is not None:
                if self._stopping:
                    return code, "stopped"
                if code == 0:
                    return code, "exited"
                return code, f"killed by {signal_name(code)} (status {code})" if code < 0 else f"failed with status {code}"
            if self._stopping and stop_sent_at is None:
                stop_sent_at = time.monotonic()
            if self._reload:
                self._reload = False
                self._reload_now()
            if stop_sent_at is not None and time.monotonic() - stop_sent_at > self.service.stop_timeout_s:
                self.child.kill()  # did not stop within the bound
                self.child.wait()
                return -9, f"killed: no exit within stop_timeout_s {self.service.stop_timeout_s:g}"
            readable, _, _ = select.select([listener, *output, *([self.live] if self.live else [])], [], [], 0.1)
            if self.live is not None and self.live in readable:
                self.live.answer()
            if output and output[0] in readable:
                self._drain(output)
            if listener in readable:
                message = listener.recv(4096).decode(errors="replace").splitlines()
                if "READY=1" in message and not ready:
                    ready = True
                    self.state = "running"
                    self._write()
                    last_state_write = time.monotonic()
                said = [line.removeprefix("STATUS=") for line in message if line.startswith("STATUS=")]
                if said:
                    self.heartbeat = (said[-1], time.monotonic(), self.child.pid)
                if "WATCHDOG=1" in message or "READY=1" in message:
                    last_ping = time.monotonic()
                if "STOPPING=1" in message and stop_sent_at is None:
                    stop_sent_at = time.monotonic()  # like systemd: a stopping service has stop_timeout_s, no watchdog
            if self.state_write_error is not None and time.monotonic() - last_state_write > 1.0:
                self._write()  # the disk was full: try again, once a second
                last_state_write = time.monotonic()
            limit = self.service.watchdog_s if ready else START_TIMEOUT_S
            if stop_sent_at is None and time.monotonic() - last_ping > limit:
                self.child.kill()  # hung: SIGTERM would wait on the very loop that stopped
                self.child.wait()
                return -9, f"watchdog: no frame for {limit:g} s" if ready else f"not ready within {limit:g} s"


def supervise(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m sdk supervise")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--root", type=Path, help="a release store: run the release that may start, and follow it")
    where.add_argument("--release", type=Path, help="one release folder, pinned (tests, a bench)")
    parser.add_argument("--status-dir", type=Path, required=True)
    parser.add_argument("--frames", type=int, default=None, help="each run stops after N frames (tests)")
    args = parser.parse_args(argv)
    os.umask(0o007)  # as the unit's UMask=: the status folder is shared with the unit's user through the group
    if args.root is not None:
        return Supervisor(None, args.status_dir.resolve(), None, args.frames, root=args.root.resolve()).run()
    return Supervisor(args.release.resolve(), args.status_dir.resolve(), None, args.frames).run()
