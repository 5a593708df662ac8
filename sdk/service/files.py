"""The service's files on the target, and their atomic writer (standard library only).

`python -m sdk service status` runs on the device's bare Python before any release environment
exists (the deploy asks it first), so nothing here may import numpy, OpenCV or pydantic.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

STATUS_FILE = "status.json"  # the runtime's health (serve.py)
SUPERVISOR_FILE = "supervisor.json"  # the supervisor's state
PID_FILE = "supervisor.pid"  # written by earlier versions; never trusted (sdk/service/instance.py), removed
LOG_FILE = "service.log"
OUTPUT_DIR = "output"  # the sinks' files of a service run


def write_json_atomic(path: Path, value: dict) -> None:
    """A reader sees the old file or the new one, never half of one."""
    partial = path.with_name(f".{path.name}.partial")
    try:
        partial.write_text(json.dumps(value, indent=1) + "\n")
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)  # a full disk must not also keep the half file
        raise


def write_error_text(exc: BaseException) -> str:
    """Why a file could not be written, in the words a user acts on: a full disk is "disk full"."""
    import errno

    number = getattr(exc, "errno", None)
    if number in (errno.ENOSPC, errno.EDQUOT):
        return "disk full"
    if number == errno.EROFS:
        return "read-only file system"
    return getattr(exc, "strerror", None) or f"{type(exc).__name__}: {exc}"


def read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def clock_stamp() -> dict:
    """When a status was written: `time` (wall clock, for people) and `monotonic` with the boot it counts in, so
    its age survives a step of the wall clock (NTP, a GNSS fix, a set RTC)."""
    import time

    from sdk.store.lease import boot_id

    return {"time": time.time(), "monotonic": time.monotonic(), "boot": boot_id()}


def status_age(record: dict | None) -> float | None:
    """Seconds since a status was written: by the monotonic clock when written in this boot, else by the wall clock."""
    import time

    from sdk.store.lease import boot_id

    record = record or {}
    if isinstance(record.get("monotonic"), (int, float)) and record.get("boot") == boot_id():
        return round(time.monotonic() - record["monotonic"], 3)
    written = record.get("time")
    return round(time.time() - written, 3) if isinstance(written, (int, float)) else None

