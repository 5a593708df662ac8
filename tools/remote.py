"""Target operations outside a deploy: probe, rollback, status."""

from __future__ import annotations

import json
from pathlib import Path

import sdk
from sdk.errors import TargetError
from tools.release.bundle import runtime_files
from tools.sessions import open_session
from tools.targets import LocalTarget, RemoteTarget, Target


def probe(target: Target) -> dict:
    """The device fingerprint in one round trip: the probe's source goes to the device's `python3 -`."""
    source = (Path(sdk.__file__).parent / "probe.py").read_bytes()
    if isinstance(target, LocalTarget):
        from sdk.probe import fingerprint

        return {"target": target.name, **fingerprint(str(target.root))}
    from tools.ssh import connect

    with connect(target) as connection:
        result = connection.run([target.spec.python, "-", target.root], stdin=source).check("probe")
    try:
        return {"target": target.name, **json.loads(result.stdout)}
    except ValueError:
        raise TargetError(f"{target.name}: the probe answered {result.stdout[:200]!r}") from None


def store_command(target: Target, op: str) -> dict:
    """`rollback` (one release back, under the deploy lock) or `status`."""
    with open_session(target) as session:
        session.ensure_agent(runtime_files())
        if op == "status":
            return session.status()
        owner = f"rollback:{target.name}"
        session.lock(owner)
        try:
            return session.store_op(op)
        finally:
            session.unlock(owner)


__all__ = ["RemoteTarget", "probe", "store_command"]
