"""`sdk selftest`: the target's current release checks its hardware, and runs the repository's gpu-marked tests
(tools/validation/selftest_bundle.py) from a scratch folder on the device (tools/connect/device_scratch.py)."""

from __future__ import annotations

import json
from pathlib import Path

from tools.connect.sessions import open_session
from tools.release.bundle import runtime_files
from tools.targets import Target


def selftest(target: Target, bundle=None, deadline_s: float = 900.0, report_dir: Path | None = None) -> dict:
    """`python -m sdk selftest` of the target's current release, run there: its hardware checks and the repository's
    gpu-marked tests (`bundle`: tools/validation/selftest_bundle.py's, packed for the probed device unless given) from a scratch
    folder that is removed afterwards. With `report_dir`: selftest.json and the tests' junit.xml written there."""
    from sdk.errors import ReleaseError
    from sdk.sinks.files import publish
    from tools.connect.device_scratch import DeviceScratch
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
    from sdk.errors import TargetError

    done = session.release_command(current, ["selftest", "--release", ".", *arguments], python)
    if done.returncode != 0:
        raise TargetError(f"{session.name}: selftest failed to run: {done.stderr.strip()[-300:]}", hint="see the release's Python environment")
    return json.loads(done.stdout.strip().splitlines()[-1])


__all__ = ["selftest"]
