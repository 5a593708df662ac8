"""What the host adds to a report's `run` section when it fetches it from the device.

The device knows when it ran, what it ran (pipeline and release hashes) and with which runtime; the
host knows who asked, from where, with which command, which checkout built the release and which
device fingerprint the deploy probed. `host`, `user` and `command` become the host's; the device's
own name stays in `device_host`.
"""

from __future__ import annotations

import hashlib
import socket
import sys
from pathlib import Path

from sdk.runtime.report import command_line, current_user, source_commit

CHECKOUT = Path(__file__).resolve().parents[2]


def host_command(argv: list[str] | None = None) -> str:
    """The command as the person typed it: `deploy --target local ...`, `python -m pytest ...`."""
    argv = list(sys.argv if argv is None else argv)
    if not argv:
        return ""
    program = Path(argv[0])
    if program.name == "__main__.py":
        head = ["python", "-m", program.parent.name]
    elif argv[0] == "-c":
        head = ["python", "-c"]
    else:
        head = [program.name]
    return command_line([*head, *argv[1:]])


def with_host_run(run: dict | None, *, target: str, fingerprint: bytes | None) -> dict:
    run = dict(run or {})
    run["device_host"] = run.get("device_host") or run.get("host")
    run["device_command"] = run.get("device_command") or run.get("command")
    run["host"] = socket.gethostname()
    run["user"] = current_user()
    run["command"] = host_command()
    run["target"] = target
    run["device_fingerprint_sha256"] = hashlib.sha256(fingerprint).hexdigest() if fingerprint is not None else None
    run["sdk_commit"] = run.get("sdk_commit") or source_commit(CHECKOUT)
    return run
