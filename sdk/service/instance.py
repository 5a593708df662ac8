"""One service per state folder, by construction: an exclusive flock held for a process's whole life.

`service.lock` is held by the supervisor (or, under systemd, by `serve --root`) from its first
moment to its last; `runtime.lock` by the runtime (`serve --release`). The kernel drops a flock
when its holder dies, kill -9 included, so a held lock is a live holder and a free one is nobody:
no PID file can go stale. Each lock file also records its holder (PID, start time in clock ticks
since boot, role) so that `sdk status` can name it and `sdk stop` can check, before it signals,
that the PID still belongs to the process that took the lock: the kernel's own list of locks
(/proc/locks) names the holder, /proc/PID/stat its start time, /proc/PID/cmdline its command.

Standard library only: `sdk service status` runs on the device's bare Python.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import time
from pathlib import Path

from sdk.procinfo import command_line, flock_holders, parent_pid, start_ticks

SERVICE_LOCK = "service.lock"  # the supervisor's (or systemd's serve --root)
RUNTIME_LOCK = "runtime.lock"  # the runtime's (serve --release)
ROLE_WORDS = {"supervisor": ("supervise", "serve"), "runtime": ("serve",)}
__all__ = ["HeldLock", "command_line", "flock_holders", "holder", "parent_pid", "start_ticks", "stop_holder"]


class HeldLock:
    """An exclusive flock on `path`, taken without waiting; the holder's record written into the file."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self.fd = fd

    @classmethod
    def acquire(cls, path: Path, role: str, extra: dict | None = None) -> HeldLock | None:
        """The lock, or None when another process holds it. The descriptor is not inherited by children
        (a child must not keep the lock after its parent died) unless `inheritable()` says so."""
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o664)  # the group: the other manager's user
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        except BaseException:
            os.close(fd)
            raise
        lock = cls(path, fd)
        lock.record(role, extra)
        return lock

    def record(self, role: str, extra: dict | None = None) -> None:
        pid = os.getpid()
        text = json.dumps({"pid": pid, "start": start_ticks(pid), "role": role, "since": time.time(), **(extra or {})}) + "\n"
        try:
            os.ftruncate(self.fd, 0)
            os.pwrite(self.fd, text.encode(), 0)
        except OSError:
            pass  # a full disk: the lock holds all the same; the kernel's /proc/locks still names the holder

    def inheritable(self) -> None:
        """Keep the lock across exec (systemd's serve --root becomes the release's serve, same PID)."""
        os.set_inheritable(self.fd, True)

    def release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)  # closing the last descriptor drops the flock
            self.fd = -1


def holder(path: Path, role: str) -> dict | None:
    """The holder of the lock at `path`: {"pid", "start", "role", "since", "verified"}; None when it is free.

    The kernel's list of locks names the holder; the record in the file is only what it wrote about
    itself (it may be stale or forged). Verified: a live process that the kernel lists as holding the
    flock, running an `sdk` command of that role for this very folder (its --status-dir). Only a
    verified holder is ever signalled, and its start time is checked again just before the signal."""
    try:
        text = path.read_text()
        record = json.loads(text) if text.strip() else {}
    except (OSError, ValueError):
        record = {}
    if not isinstance(record, dict):
        record = {}
    holders = flock_holders(path)
    from_kernel = holders is not None
    if holders is None:  # no /proc/locks: the lock itself answers (a shared probe, released at once)
        holders = _probe(path, record)
    if not holders:
        return None
    pid = record.get("pid") if record.get("pid") in holders else min(holders)
    started = start_ticks(pid) if pid > 0 else None
    verified = started is not None and _runs_here(pid, role, path.parent)
    if not from_kernel:  # the PID came from the record: it must also be the process that wrote it
        verified = verified and started == record.get("start")
    mine = record.get("pid") == pid
    return {"pid": pid, "start": started, "role": role, "since": record.get("since") if mine else None, "verified": verified}


INTERPRETER_FLAGS = {"-B", "-E", "-I", "-O", "-OO", "-P", "-q", "-s", "-u"}  # what may stand before `-m sdk ROLE`


def sdk_role(command: list[str]) -> str | None:
    """The `sdk` command a process runs, read as the interpreter reads its arguments: `PYTHON [flags] -m sdk ROLE ...`,
    with only interpreter flags before `-m` (never `-c`: a command line that merely mentions `sdk supervise` is
    nobody's supervisor). None for anything else."""
    for index, part in enumerate(command[1:], start=1):
        if part == "-m":
            rest = command[index + 1 : index + 3]
            return rest[1] if len(rest) == 2 and rest[0] == "sdk" else None
        if part not in INTERPRETER_FLAGS:
            return None
    return None


def _runs_here(pid: int, role: str, folder: Path) -> bool:
    command = command_line(pid)
    if sdk_role(command) not in ROLE_WORDS.get(role, ()):
        return False
    try:
        where = Path(command[command.index("--status-dir") + 1])
        if not where.is_absolute():
            where = Path(os.readlink(f"/proc/{pid}/cwd")) / where
        return where.resolve() == folder.resolve()
    except (ValueError, IndexError, OSError):
        return False


def _probe(path: Path, record: dict) -> set[int]:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return set()
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        pid = record.get("pid")
        return {pid} if isinstance(pid, int) else {-1}
    finally:
        os.close(fd)
    return set()


def signal_verified(who: dict, signum: int) -> bool:
    """Send `signum` to a verified holder, re-checking its start time first (a PID that ended since may be
    anyone's now); False when it is gone or unverified."""
    pid = who.get("pid")
    if not who.get("verified") or not isinstance(pid, int) or pid <= 1:
        return False
    if start_ticks(pid) != who.get("start"):
        return False
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        return False
    return True


def legacy_supervisor(folder: Path, pid_file: str = "supervisor.pid") -> dict | None:
    """A supervisor of a release deployed before these locks (it writes supervisor.pid and holds no lock):
    verified by its command line alone, `sdk supervise --status-dir <this folder>`, so a PID that now
    belongs to anything else is never taken for it."""
    try:
        pid = int((folder / pid_file).read_text().strip())
    except (OSError, ValueError):
        return None
    started = start_ticks(pid) if pid > 1 else None
    if started is None or not _runs_here(pid, "supervisor", folder) or sdk_role(command_line(pid)) != "supervise":
        return None
    return {"pid": pid, "start": started, "role": "supervisor", "since": None, "verified": True, "legacy": True}


def stop_holder(path: Path, role: str, wait_s: float, kill_after: bool = False, who: dict | None = None) -> dict | None:
    """SIGTERM the verified holder of `path` (or `who`, already verified) and wait until the lock is free and
    the process gone (SIGKILL after `wait_s` if `kill_after`). Returns the holder it stopped, or None where
    there was none (or none verified)."""
    who = who or holder(path, role)
    if who is None or not signal_verified(who, signal.SIGTERM):
        return None
    if _wait_gone(path, role, who, wait_s):
        return {**who, "stopped": True}
    if kill_after and signal_verified(who, signal.SIGKILL):
        _wait_gone(path, role, who, 5.0)
    return {**who, "stopped": _gone(path, role, who)}


def _gone(path: Path, role: str, who: dict) -> bool:
    if start_ticks(who["pid"]) == who["start"]:
        return False
    return who.get("legacy") or holder(path, role) is None


def _wait_gone(path: Path, role: str, who: dict, wait_s: float) -> bool:
    """Until the lock is free and its holder has exited (it releases the lock a moment before it ends)."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if _gone(path, role, who):
            return True
        time.sleep(0.05)
    return False
