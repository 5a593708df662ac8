"""Target operations outside a deploy: probe, rollback, status, and the service (start, stop, logs)."""

from __future__ import annotations

from pathlib import Path

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
    """`start` (the current release under the supervisor, waits for READY), `stop` (bounded), `logs`."""
    with open_session(target) as session:
        session.ensure_agent(runtime_files())
        return session.service_op(op, *args)


def selftest(target: Target, bundle=None, deadline_s: float = 900.0, report_dir: Path | None = None) -> dict:
    """`python -m sdk selftest` of the target's current release, run there: its hardware checks and the repository's
    gpu-marked tests (`bundle`: tools/validation/selftest_bundle.py's, packed for the probed device unless given) from a scratch
    folder that is removed afterwards. With `report_dir`: selftest.json and the tests' junit.xml written there."""
    import json

    from sdk.errors import ReleaseError
    from sdk.sinks.files import publish
    from tools.deploy.device_scratch import DeviceScratch
    from tools.state import cache_dir
    from tools.validation.selftest_bundle import build_bundle

    with open_session(target) as session:
        session.ensure_agent(runtime_files())
        current = session.store_op("startable")["release"]  # what a start runs: committed, read and verified (never a trial)
        python = session.env(current)
        unpacked = None
        if bundle is None:
            try:
                bundle = build_bundle(session.probe(), cache_dir())
            except ReleaseError as exc:
                unpacked = {"name": "gpu_tests", "status": "SKIP", "detail": f"the gpu tests did not run: {exc.message}", "tests": []}
        if bundle is None:
            result = _device_selftest(session, current, python, [])
            result["checks"].append(unpacked)
        else:
            with DeviceScratch(session, "selftest", bundle.contents()) as scratch:
                arguments = ["--tests", scratch.path, "--tests-deadline", f"{deadline_s:g}"]
                result = _device_selftest(session, current, python, arguments)
                if report_dir is not None:
                    partial = Path(report_dir) / ".junit.xml.partial"
                    if scratch.fetch("junit.xml", partial):
                        publish(partial, Path(report_dir) / "junit.xml")
    if report_dir is not None:
        Path(report_dir).mkdir(parents=True, exist_ok=True)
        partial = Path(report_dir) / ".selftest.json.partial"
        partial.write_text(json.dumps({"target": target.name, **result}, indent=1) + "\n")
        publish(partial, Path(report_dir) / "selftest.json")
    return result


def _device_selftest(session, current: str, python: str | None, arguments: list[str]) -> dict:
    import json

    from sdk.errors import TargetError

    done = session.release_command(current, ["selftest", "--release", ".", *arguments], python)
    if done.returncode != 0:
        raise TargetError(f"{session.name}: selftest failed to run: {done.stderr.strip()[-300:]}", hint="see the release's Python environment")
    return json.loads(done.stdout.strip().splitlines()[-1])


__all__ = ["probe", "selftest", "service_command", "store_command"]
