"""The `local` target's session: the release store driven directly, the runtime and the device's own
lock holder and trial as child processes (the same code a vehicle runs over SSH).
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from sdk.errors import ReleaseError, SdkError, TargetError
from sdk.release import ReleaseManifest, release_command
from sdk.store.objects import DISK_FULL, ReleaseStore, disk_full
from tools.connect.session_protocol import (
    LOCK_LEASE_LOCAL_S,
    RunOutcome,
    TrialOutcome,
    _locked,
    _trial_answer,
    hold_lock_arguments,
    parse_event,
    run_arguments,
    trial_arguments,
)
from tools.connect.ssh import error_line
from tools.progress import Task
from tools.targets import LocalTarget

IN_PROCESS_FLAGS = {"status": {}, "unit": {"--user": str}, "stop": {"--wait": float}, "logs": {"--lines": int}}


def _service_options(op: str, args: tuple[str, ...]) -> dict | None:
    """The flags of a service operation this session runs in its own process, by name; None: a child process runs it
    (start, install, or a flag not listed here)."""
    flags = IN_PROCESS_FLAGS.get(op)
    if flags is None or len(args) % 2:
        return None
    options = {}
    for flag, value in zip(args[::2], args[1::2], strict=True):
        if flag not in flags:
            return None
        try:
            options[flag.removeprefix("--")] = flags[flag](value)
        except ValueError:
            return None  # the command's own parser says what is wrong
    return options


class LocalSession:
    def __init__(self, target: LocalTarget) -> None:
        self.target = target
        self.name = target.name
        self.store = ReleaseStore(target.root)
        self._lock = None
        self.token: int | None = None

    def __enter__(self) -> LocalSession:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def ensure_agent(self, runtime_files: dict[str, Path]) -> None:
        """Nothing to install: the local store runs in this process."""

    def use_agent_files(self, runtime_files: dict[str, Path]) -> None:
        """Nothing to install (see ensure_agent)."""

    @property
    def lock_wait_s(self) -> float:
        """How long `lock` waits for another holder (its lease ends by then, or the target is busy)."""
        return LOCK_LEASE_LOCAL_S + 60

    def lock(self, owner: str) -> None:
        """The device's own lock holder as a child process (the same code a vehicle runs over SSH)."""
        from tools.connect.local_process import LocalProcess

        self.store.ensure()
        argv = [sys.executable, "-B", "-m", "sdk", "store", "--root", str(self.store.root), *hold_lock_arguments(owner, LOCK_LEASE_LOCAL_S)]
        process = LocalProcess(argv)
        self.token = _locked(process, owner, self.lock_wait_s, self.name)
        process.heartbeat(every=LOCK_LEASE_LOCAL_S / 4)
        self._lock = process

    def unlock(self, owner: str) -> None:
        if self._lock is not None:
            self._lock.close()
            self._lock = None
            self.token = None

    def trial(self, release_id: str, owner: str, policy, on_event: Callable[[dict], None]) -> TrialOutcome:
        """The device-owned trial (`python -m sdk store trial`), in a child process as on a vehicle."""
        arguments = trial_arguments(release_id, self.token, owner, self.name, policy)
        argv = [sys.executable, "-B", "-m", "sdk", "store", "--root", str(self.store.root), *arguments]
        child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        lines = []
        for line in child.stdout:
            lines.append(line)
            on_event(parse_event(line))
        stderr = child.stderr.read()
        return _trial_answer(lines, stderr, child.wait(), self.name)

    def prepare(self) -> dict:
        with self.store.locked():
            self.store.sweep_temporaries()
            recovered = self.store.recover()
            return {"recovered": recovered, "free_bytes": self.store.free_bytes(), **self.store.status()}

    def present(self, objects: dict[str, int]) -> set[str]:
        with self.store.locked():
            return {sha for sha, size in objects.items() if self.store.has_object(sha, size, verify=True)}

    def resume_points(self, objects: dict[str, int]) -> tuple[dict[str, int], int]:
        """A local copy never resumes: every leftover upload goes (see SshSession.resume_points)."""
        with self.store.locked():
            before = self.store.free_bytes()
            self.store.sweep_temporaries(keep_uploads=False)
            return {}, self.store.free_bytes() - before

    def upload(self, objects: dict[str, tuple[int, Path]], task: Task) -> int:
        left = sum(size for size, _ in objects.values())
        for sha256, (size, source) in objects.items():
            try:
                self.store.add_file(source, sha256)  # removes its partial copy when it fails
            except OSError as exc:
                if exc.errno in DISK_FULL:
                    raise disk_full(self.name, left, self.store.free_bytes()) from None
                raise ReleaseError(f"{self.name}: copying {source} into the store failed: {exc.strerror or exc}") from None
            left -= size
            task.advance(size)
        return sum(size for size, _ in objects.values())

    def assemble(self, manifest: ReleaseManifest, signature: str | None = None) -> None:
        with self.store.locked():
            self.store.assemble(manifest, signature)

    def trust(self, request: dict) -> dict:
        """What the device trusts: a request of sdk/store/trust_admin.py (status, add, revoke), answered by the store's code."""
        from sdk.store.trust_admin import administer

        with self.store.locked():
            return administer(self.store, request)

    def store_op(self, op: str, *args: str) -> dict:
        if op == "startable":  # by reading: a full or read-only store still answers (sdk/store/startable.py)
            from sdk.store.startable import resolve_startable

            return resolve_startable(self.store).describe()
        with self.store.locked():
            if op == "commit":
                if_damaged = args[args.index("--if-damaged") + 1] if "--if-damaged" in args else None
                self.store.commit(token=self.token, if_damaged=if_damaged)
            elif op == "recover":
                return {"recovered": self.store.recover(), **self.store.status()}
            elif op == "rollback":
                self.store.rollback(token=self.token)
            elif op == "prune":
                self.store.prune(token=self.token)
            return self.store.status()

    def probe(self) -> dict:
        from sdk.probe import fingerprint

        return fingerprint(str(self.target.root))

    def service_op(self, op: str, *args: str, python: str | None = None) -> dict:
        """`python -m sdk service OP`. `start` runs in a child process, as a device runs it: that command detaches the
        supervisor, which outlives it. The others (status, stop, logs, unit) need no process of their own: the same
        operation (sdk/service/control.py) runs in this process, which imported the store's code already; a Python
        start-up cost more than they do (the unit's, rendered after every commit, about 0.8 CPU-s)."""
        options = _service_options(op, args)
        if options is not None:
            from sdk.service.control import operate

            try:
                return operate(self.store, op, options)
            except SdkError as exc:  # what the command's one `error:` line would say
                raise TargetError(f"local: service {op}: {exc.message}", hint="see `sdk logs --target local`") from None
        token = ["--token", str(self.token)] if op == "start" and self.token is not None else []  # the deploy restarts what it paused
        command = [sys.executable, "-B", "-m", "sdk", "service", "--root", str(self.store.root), op, *args, *token]
        done = subprocess.run(command, capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            raise TargetError(f"local: service {op}: {error_line(done.stderr) or done.stderr[-300:]}", hint="see `sdk logs --target local`")
        return json.loads(done.stdout.strip().splitlines()[-1])

    def env(self, release_id: str) -> str | None:
        from sdk.store.offline_env import existing_env

        # read only: a full or read-only store still answers
        ready, python = existing_env(self.store.release_dir(release_id), self.store.env_dir(release_id))
        if ready:
            return str(python) if python else None
        with self.store.locked():
            python = self.store.build_env(release_id)
        return str(python) if python else None

    def run(
        self,
        release_id: str,
        run_name: str,
        frames: int | None,
        on_event: Callable[[dict], None],
        python: str | None = None,
        stress: str | None = None,
        live_view: int | None = None,
        evaluate: str | None = None,
    ) -> RunOutcome:
        """The release's own runtime in a child process, its working directory the release folder."""
        release = self.store.release_dir(release_id)
        run_dir = self.store.run_dir(run_name)
        shutil.rmtree(run_dir, ignore_errors=True)
        launch = release_command(release, run_arguments(str(release), str(run_dir), self.name, frames, stress, live_view, evaluate), python=python)
        child = subprocess.Popen(launch.argv, cwd=launch.cwd, env=launch.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            for line in child.stdout:
                on_event(parse_event(line))
            stderr = child.stderr.read()
            code = child.wait()
        except KeyboardInterrupt:
            child.send_signal(signal.SIGTERM)  # the runtime stops cleanly and still writes its report
            child.wait()
            raise
        return RunOutcome(code, stderr)

    def _python_in(self, release: str, python: str | None) -> list[str]:
        """The device's Python, started inside the release folder. The folder is a positional argument
        of a fixed script: no user value is parsed by the shell."""
        return ["sh", "-c", 'cd "$1" && shift && exec "$@"', "sh", release, "env", "PYTHONDONTWRITEBYTECODE=1", python or self.python]

    def release_command(self, release_id: str, args: list[str], python: str | None = None) -> subprocess.CompletedProcess:
        """`python -m sdk ARGS` of the release itself, in its folder (its own sdk, not the host's)."""
        release = self.store.release_dir(release_id)
        launch = release_command(release, args, python=python)
        return subprocess.run(launch.argv, cwd=launch.cwd, env=launch.env, capture_output=True, text=True, timeout=3600)

    def fetch_run(self, run_name: str, destination: Path) -> None:
        """Move the run's files into the host report folder (same machine: a rename, not a copy)."""
        run_dir = self.store.run_dir(run_name)
        destination.mkdir(parents=True, exist_ok=True)
        for path in run_dir.iterdir():
            if not path.name.startswith("."):
                shutil.move(str(path), destination / path.name)
        shutil.rmtree(run_dir, ignore_errors=True)

    def clear_run(self, run_name: str) -> None:
        self.store.clear_run(run_name)

    def status(self) -> dict:
        return self.store.status()
