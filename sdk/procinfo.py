"""Who a process is and which process holds a lock, read from /proc (standard library only).

A PID alone names nobody for long: a process is its PID and its start time (clock ticks after boot,
field 22 of /proc/PID/stat); the kernel's list of locks (/proc/locks) names the holder of a flock.
The service's locks (sdk/service/instance.py) and the store's mutex (sdk/store/objects.py) use these to say
who holds what, and to signal only a process verified as the holder.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

from sdk.errors import ReleaseError


class LockBusy(ReleaseError):
    """A lock stayed held past its wait: its holder is named, nothing was changed."""

    default_hint = "that process is stuck or slow: wait for it, or end it if it is not a deploy you know of"


def flock_within(fd: int, path: Path, wait_s: float, what: str) -> None:
    """An exclusive flock on `fd`, waiting at most `wait_s`; LockBusy naming the holder (from the kernel's
    /proc/locks and its command line) after that. Never a wait without end."""
    deadline = time.monotonic() + wait_s
    pause = 0.01
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                break
            time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
            pause = min(pause * 2, 0.2)
    raise LockBusy(f"{what} is locked by {lock_holder_text(path)}; waited {wait_s:g} s, nothing was changed")


def lock_holder_text(path: Path) -> str:
    """'pid 1234 (python3 -m sdk store ...)' for the process the kernel names as the flock's holder."""
    holders = sorted(flock_holders(path) or ())
    if not holders:
        return "another process"
    command = " ".join(command_line(holders[0]))[:160] or "command line unreadable"
    return f"pid {holders[0]} ({command})"


def start_ticks(pid: int) -> int | None:
    """Field 22 of /proc/PID/stat: when the process started, in clock ticks after boot (None: no such process)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()
    if fields[0] == "Z":  # a zombie has ended; only its parent has not reaped it yet
        return None
    return int(fields[19])


def parent_pid(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def command_line(pid: int) -> list[str]:
    try:
        return [part.decode(errors="replace") for part in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if part]
    except OSError:
        return []


def flock_holders(path: Path) -> set[int] | None:
    """PIDs holding an exclusive flock on this file per the kernel (/proc/locks); None where that cannot be read."""
    try:
        st = os.stat(path)
        text = Path("/proc/locks").read_text()
    except FileNotFoundError:
        return set()
    except OSError:
        return None
    key = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    holders = set()
    for line in text.splitlines():
        parts = line.split()
        if "->" in parts:  # a waiter ("1: -> FLOCK ..."), not a holder
            continue
        if len(parts) >= 6 and parts[1] == "FLOCK" and parts[3] == "WRITE" and parts[5] == key:
            holders.add(int(parts[4]))
    return holders
