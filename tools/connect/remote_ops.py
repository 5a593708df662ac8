"""Target operations outside a deploy: probe, rollback, status, and the service (start, stop, logs); the selftest,
which also ships the gpu-marked tests, is tools/validation/selftest.py."""

from __future__ import annotations

from tools.connect.sessions import open_session
from tools.release.bundle import runtime_files
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
            return {**session.status(), "service": session.service_op("status")}
        owner = f"rollback:{target.name}"
        session.lock(owner)
        try:
            result = session.store_op(op)
            if op == "rollback":  # the unit follows the committed release, like after a deploy's commit
                result["service_unit"] = session.service_op("unit")
            return result
        finally:
            session.unlock(owner)


def service_command(target: Target, op: str, *args: str) -> dict:
    """`start` (the current release under the supervisor, waits for READY), `stop` (bounded), `logs`: one command of
    the agent's copy, with no agent process beside it."""
    with open_session(target) as session:
        session.use_agent_files(runtime_files())
        return session.service_op(op, *args)


__all__ = ["probe", "service_command", "store_command"]
