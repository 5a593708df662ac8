"""Target operations outside a deploy: probe, rollback, status."""

from __future__ import annotations

from tools.release.bundle import runtime_files
from tools.sessions import open_session
from tools.targets import Target


def probe(target: Target) -> dict:
    """The device fingerprint in one round trip (`sdk targets probe`)."""
    with open_session(target) as session:
        return {"target": target.name, **session.probe()}


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


__all__ = ["probe", "store_command"]
