"""Target operations outside a deploy: probe, rollback, status, and the service (start, stop, logs)."""

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
    """`start` (the current release under the supervisor, waits for READY), `stop` (bounded), `logs`."""
    with open_session(target) as session:
        session.ensure_agent(runtime_files())
        return session.service_op(op, *args)


def selftest(target: Target) -> dict:
    """`python -m sdk selftest` of the target's current release, run there: its hardware checks."""
    import json

    from sdk.errors import TargetError

    with open_session(target) as session:
        session.ensure_agent(runtime_files())
        current = session.status().get("current")
        if current is None:
            raise TargetError(f"no release is current on {target.name}", hint=f"deploy one first: deploy --target {target.name} PIPELINE")
        done = session.release_command(current, ["selftest", "--release", "."], session.env(current))
        if done.returncode != 0:
            raise TargetError(f"{target.name}: selftest failed to run: {done.stderr.strip()[-300:]}", hint="see the release's Python environment")
        return json.loads(done.stdout.strip().splitlines()[-1])


__all__ = ["probe", "selftest", "service_command", "store_command"]
