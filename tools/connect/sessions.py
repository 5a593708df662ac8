"""One deploy's conversation with a target, the same for `local` and for a vehicle over SSH.

LocalSession (tools/connect/session_local.py) drives the release store directly and runs the runtime as a
child process; SshSession (tools/connect/session_ssh.py) drives the very same store code on the device
(`python -m sdk store ...` from a small agent copy of `sdk`), uploads over SSH, and runs the runtime
there. What both say and hear is in tools/connect/session_protocol.py. The deploy flow in tools/deploy/flow.py
only speaks this interface.
"""

from __future__ import annotations

from contextlib import contextmanager

from tools.connect.session_local import LocalSession
from tools.connect.session_protocol import RunOutcome
from tools.connect.session_ssh import SshSession
from tools.targets import LocalTarget


def open_session(target):
    """The session for a target; SSH connects lazily, through a jump host when the target names one."""
    if isinstance(target, LocalTarget):
        return LocalSession(target)
    if target.spec.labgrid is not None:
        from tools.connect.labgrid_place import open_place_session

        return open_place_session(target)
    from tools.connect.ssh import connect

    return SshSession(target, connect(target))


__all__ = ["LocalSession", "RunOutcome", "SshSession", "open_session", "paused_service", "take_lease"]


@contextmanager
def paused_service(session, progress=None, owner: str | None = None):
    """Hold the target's deploy lease, stop its running service for a deploy or a validation, and start it again
    afterwards, before the lease is released.

    A measurement next to the running pipeline would measure the contention, and a trial activation must not race
    the service for the camera. Holding the lease from the pause to the restart serialises all of it with `sdk
    start` and with every other deploy or validation of the same store (two target files naming one device
    included): a service never runs beside a trial or a measured run. Afterwards the service runs what may start:
    the new release when it was committed, the previous one when it was rolled back."""
    import os
    import socket

    from tools.release.bundle import runtime_files

    owner = owner or f"{socket.gethostname()}:{os.getpid()}"
    session.ensure_agent(runtime_files())
    take_lease(session, owner, progress)
    try:
        was_running = session.service_op("status")["running"]
        if was_running:
            task = progress.task(f"stopping the service on {session.name}", total=None) if progress else None
            session.service_op("stop")
            if task:
                task.done()
        try:
            yield was_running
        finally:
            if was_running:
                task = progress.task(f"restarting the service on {session.name}", total=None) if progress else None
                session.service_op("start")  # with the lease's token: this deploy restarts what it paused
                if task:
                    task.done()
    finally:
        session.unlock(owner)


def take_lease(session, owner: str, progress=None) -> None:
    """The deploy lease (`session.lock`); a wait for another holder is said while it lasts: who holds it, and for how
    long at most this waits."""
    from sdk.errors import SdkError

    holder = None
    if progress is not None:
        try:
            holder = (session.status() or {}).get("lease")
        except SdkError:  # the lock itself says what is wrong
            holder = None
    task = None
    if holder and holder.get("owner") != owner:
        what = f"waiting for the deploy lease on {session.name}: held by {holder.get('owner')} (token {holder.get('token')})"
        task = progress.task(f"{what}, for at most {session.lock_wait_s:.0f} s", announce=True)
    try:
        session.lock(owner)
    finally:
        if task is not None:
            task.done()
