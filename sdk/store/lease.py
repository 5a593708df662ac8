"""The deploy lease on a target: one holder at a time, a fencing token that only grows.

    <root>/deploy.lock    flock held by the lease's holder for its whole life
    <root>/lease.token    the last token issued (fsynced: it never goes back, even over a power cut)
    <root>/lease.json     the holder: owner, token, pid and start time, boot id, last renewal

A lease is live while its holder process is alive (same pid and start time, same boot), has been
renewed within `lease_s`, and has not ended. Every step that changes what runs (trial switch,
commit, prune, rollback) checks its token against the live lease under the store's mutex, in the
same critical section as the change (`check_token`): a deploy that lost its lease changes nothing.
A holder that dies frees the kernel lock at once; a holder that stops hearing from its host ends the
lease itself (`store hold-lock`), rolling back its own unfinished trial first.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from sdk.durable import open_new
from sdk.errors import ReleaseError
from sdk.store.faults import point

LOCK_FILE = "deploy.lock"
LEASE_FILE = "lease.json"
TOKEN_FILE = "lease.token"


class FencingError(ReleaseError):
    """A step was asked for with a token that no longer holds the target's lease."""

    default_hint = "another deploy or rollback took the target over; check `sdk status --target T`, then deploy again"


def boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return "unknown"


def process_start(pid: int) -> str | None:
    """The kernel's start time of a process (clock ticks since boot): a pid reused later has another.

    Read from its main thread's stat (the same start time): qemu-user answers a process's reads of its own
    /proc/<pid>/stat with a stand-in whose start time is off by a few ticks (an emulated aarch64 device), but
    passes /proc/<pid>/task/<pid>/stat through, so the holder and every other process read the same value."""
    try:
        fields = Path(f"/proc/{pid}/task/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    if len(fields) < 20 or fields[0] in ("Z", "X"):  # a zombie has ended: only its parent has not reaped it yet
        return None
    return fields[19]


def _write_atomic(path: Path, value: object, *, durable: bool) -> None:
    temporary = path.with_name(f".tmp-{path.name}-{os.getpid()}")
    try:
        with open_new(temporary) as handle:  # a name planted here is removed, never written through
            json.dump(value, handle)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        os.replace(temporary, path)
    except OSError:
        temporary.unlink(missing_ok=True)  # a full disk keeps nothing of the try
        raise
    if durable:
        fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@dataclass(frozen=True)
class Lease:
    owner: str
    token: int
    pid: int
    start: str | None
    boot: str
    lease_s: float
    renewed: float  # time.monotonic() of the last renewal (CLOCK_MONOTONIC: one clock for every process of a boot)
    ended: bool = False

    def live(self) -> bool:
        if self.ended or self.boot != boot_id() or process_start(self.pid) != self.start:
            return False
        return time.monotonic() - self.renewed <= self.lease_s

    def describe(self) -> str:
        return f"{self.owner} (token {self.token})"


def read_lease(root: Path) -> Lease | None:
    try:
        data = json.loads((Path(root) / LEASE_FILE).read_text())
        return Lease(
            str(data["owner"]),
            int(data["token"]),
            int(data["pid"]),
            data.get("start"),
            str(data["boot"]),
            float(data["lease_s"]),
            float(data["renewed"]),
            bool(data.get("ended", False)),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _last_token(root: Path) -> int:
    """The last token issued. A token file that exists but cannot be read (damaged, a directory, a disk error) gives
    the Unix time: tokens must only grow, and no store issues a token per second since 1970, so the next one is
    above every token this store could have handed out."""
    try:
        text = (root / TOKEN_FILE).read_text().strip()
    except FileNotFoundError:
        return 0
    except OSError:
        return int(time.time())
    try:
        value = int(text or 0)
    except ValueError:
        return int(time.time())
    return value if value >= 0 else int(time.time())


def check_token(root: Path, token: int) -> None:
    """Raise FencingError unless `token` is the target's live lease. Call under the store's mutex."""
    lease = read_lease(root)
    if lease is not None and lease.token == token and lease.live():
        return
    if lease is None or not lease.live():
        now = "nobody holds the target now"
    elif lease.token != token:
        now = f"{lease.describe()} holds it now"
    else:
        now = "it ended"
    raise FencingError(f"this deploy's lease on the target (token {token}) has expired and {now}; nothing was changed")


class LeaseHolder:
    """The deploy lock and its lease, held until `end()` (or until this process dies)."""

    def __init__(self, root: Path, handle, lease: Lease) -> None:
        self.root = Path(root)
        self._handle = handle
        self.lease = lease

    @property
    def token(self) -> int:
        return self.lease.token

    def renew(self) -> None:
        self.lease = Lease(**{**self.lease.__dict__, "renewed": time.monotonic()})
        _write_atomic(self.root / LEASE_FILE, self.lease.__dict__, durable=False)

    def end(self) -> None:
        if self._handle is None:
            return
        ended = Lease(**{**self.lease.__dict__, "ended": True})
        _write_atomic(self.root / LEASE_FILE, ended.__dict__, durable=False)
        self._handle.close()  # frees the kernel lock
        self._handle = None

    close = end


def acquire(root: Path, owner: str, *, wait_s: float = 0.0, lease_s: float = 30.0) -> LeaseHolder:
    """Take the deploy lock, waiting up to `wait_s`, and start a lease with the next token."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + wait_s
    handle = (root / LOCK_FILE).open("a+")
    while True:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() < deadline:
                time.sleep(0.2)
                continue
            handle.seek(0)
            who = handle.read().strip() or "another deploy"
            handle.close()
            raise ReleaseError(f"the target is busy: {who} is deploying to it", hint="wait for that deploy to finish") from None
    last = _last_token(root)
    previous = read_lease(root)
    token = max(last, previous.token if previous else 0) + 1
    _write_atomic(root / TOKEN_FILE, token, durable=True)
    point("lease.token-written")
    pid = os.getpid()
    lease = Lease(owner, token, pid, process_start(pid), boot_id(), float(lease_s), time.monotonic())
    _write_atomic(root / LEASE_FILE, lease.__dict__, durable=False)
    point("lease.recorded")
    handle.seek(0)
    handle.truncate()
    handle.write(f"{owner} since {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
    handle.flush()
    return LeaseHolder(root, handle, lease)


@contextmanager
def deploy_excluded(root: Path, token: int | None, wait_s: float) -> Iterator[None]:
    """No deploy (or rollback) holds the target while this runs: a service start never runs beside a trial or a
    measured run. With `token`, the caller is that deploy itself (it restarts the service it paused): its lease
    must be live. Otherwise the deploy lock is taken for the block, read-only (no write: a full or read-only
    store still starts), waiting at most `wait_s`; a deploy still holding it then is a LockBusy naming it."""
    from sdk.procinfo import LockBusy, flock_within

    root = Path(root)
    if token is not None:
        check_token(root, token)
        yield
        return
    try:
        fd = os.open(root / LOCK_FILE, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        yield  # no deploy ever held this target
        return
    try:
        try:
            flock_within(fd, root / LOCK_FILE, wait_s, f"the target at {root}")
        except LockBusy:
            who = os.pread(fd, 300, 0).decode(errors="replace").strip() or "another deploy"
            raise LockBusy(
                f"a deploy holds the target ({who}): the service does not start beside its trial or its measured run",
                hint="the deploy restarts the service it paused when it ends; start it after that deploy if it was not running",
            ) from None
        yield
    finally:
        os.close(fd)

