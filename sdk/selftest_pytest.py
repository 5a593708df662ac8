"""The `gpu_tests` check of `python -m sdk selftest`: the repository's `gpu`-marked pytest tests, run on the device.

The host uploads a selftest bundle into a scratch folder (never into the release or its store): the gpu-marked test
files with what they import from tests/, a pytest.ini, and offline wheels of pytest and its pure-Python
dependencies (`wheels/`), or NO_WHEELS with the reason they could not be fetched. Here the wheels are laid into
`site/` (the standard library's unzip, as for a release's environment: no pip, no network) and the tests run with
this very interpreter (the release's environment) from the release's folder, so they import the release's `sdk`:

    python -m pytest -c BUNDLE/pytest.ini --rootdir BUNDLE -m gpu --junitxml BUNDLE/junit.xml BUNDLE/tests/...

under a deadline; the JUnit XML becomes one entry per test (passed, failed, error, skipped with its reason).
Decision 0450.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

PASS, FAIL, SKIP = "PASS", "FAIL", "SKIP"
JUNIT = "junit.xml"
NO_WHEELS = "NO_WHEELS"  # written by the host instead of wheels/: why pytest could not be shipped
CONTENTS = "bundle.json"  # the host's list of the test files, and what it left out and why
DEFAULT_DEADLINE_S = 900.0
# pytest's exit codes (pytest.ExitCode): 0 all passed, 1 some failed, 5 nothing collected; the others are breakage.
RAN = (0, 1, 5)


def _pytest_importable() -> str | None:
    """The version of a pytest this interpreter already has, or None."""
    import importlib.util

    if importlib.util.find_spec("pytest") is None:
        return None
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("pytest")
    except PackageNotFoundError:
        return "unknown"


def _lay_wheels(bundle: Path) -> tuple[Path | None, str]:
    """site/ with the shipped wheels, or (None, why) where the host shipped none and this Python has no pytest."""
    from sdk.store.offline_env import _unpack_wheel

    wheels = sorted((bundle / "wheels").glob("*.whl")) if (bundle / "wheels").is_dir() else []
    if wheels:
        site = bundle / "site"
        site.mkdir(exist_ok=True)
        for wheel in wheels:
            _unpack_wheel(wheel, site)
        return site, f"pytest from the {len(wheels)} shipped wheel(s)"
    why = (bundle / NO_WHEELS).read_text().strip() if (bundle / NO_WHEELS).is_file() else "the bundle carries no wheels"
    have = _pytest_importable()
    if have is None:
        return None, f"pytest could not be shipped ({why}) and this device's Python has none"
    return bundle / "site", f"the device's own pytest {have} (none shipped: {why})"


def _collection_skip_reason(text: str) -> str:
    import ast

    try:
        _, _, reason = ast.literal_eval(text.strip())
    except (ValueError, SyntaxError, TypeError):
        return text.strip()
    return str(reason).removeprefix("Skipped: ")


def parse_junit(path: Path) -> list[dict]:
    """One entry per test case: name, outcome (passed, failed, error, skipped), reason (the skip's or the failure's
    message), seconds."""
    import xml.etree.ElementTree as ElementTree

    tests = []
    for case in ElementTree.parse(path).getroot().iter("testcase"):
        outcome, reason = "passed", ""
        for tag in ("failure", "error", "skipped"):
            element = case.find(tag)
            if element is not None:
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
                lines = (element.text or "").strip().splitlines()
                reason = element.get("message") or (lines[-1] if lines else "")
                if reason == "collection skipped":  # pytest writes the skip's (path, line, reason) tuple as the text
                    reason = _collection_skip_reason(element.text or "")
                break
        name = f"{case.get('classname', '')}::{case.get('name', '')}".strip(":")
        tests.append({"name": name, "outcome": outcome, "reason": reason[:500], "seconds": round(float(case.get("time") or 0), 3)})
    return tests


def _judge(tests: list[dict], exit_code: int, stderr_tail: str, how: str) -> tuple[str, str]:
    counts = {outcome: sum(t["outcome"] == outcome for t in tests) for outcome in ("passed", "failed", "error", "skipped")}
    summary = ", ".join(f"{n} {outcome}" for outcome, n in counts.items() if n) or "no tests"
    if exit_code not in RAN:
        return FAIL, f"pytest ended with exit code {exit_code} ({summary}): {stderr_tail}"
    if counts["failed"] or counts["error"]:
        bad = "; ".join(f"{t['name']}: {t['reason']}" for t in tests if t["outcome"] in ("failed", "error"))[:600]
        return FAIL, f"{summary} ({how}): {bad}"
    if not counts["passed"]:
        reasons = sorted({t["reason"] for t in tests if t["outcome"] == "skipped"})
        return SKIP, f"{summary} ({how}): " + ("; ".join(reasons)[:600] if reasons else "no gpu-marked test was collected")
    return PASS, f"{summary} ({how})"


def run_gpu_tests(release: Path, bundle: Path, deadline_s: float = DEFAULT_DEADLINE_S) -> dict:
    """The `gpu_tests` check: status, detail, and `tests` (one entry per test case)."""
    contents = json.loads((bundle / CONTENTS).read_text())
    site, how = _lay_wheels(bundle)
    check = {"tests": [], "junit": None, "left_out": contents.get("left_out", [])}
    if site is None:
        return {**check, "status": SKIP, "detail": f"the gpu tests did not run: {how}"}
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    # No third-party pytest plugins of the device's Python: the bundle's tests need none, and its result must not
    # depend on what else the device has installed.
    env.update(PYTHONPATH=str(site), PYTHONDONTWRITEBYTECODE="1", SDK_SELFTEST_RELEASE=str(release), PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")
    junit = bundle / JUNIT
    (bundle / "tmp").mkdir(exist_ok=True)
    command = [
        sys.executable, "-B", "-m", "pytest", "-c", str(bundle / "pytest.ini"), "--rootdir", str(bundle), "-m", "gpu",
        f"--junitxml={junit}", "-p", "no:cacheprovider", "--basetemp", str(bundle / "tmp"), "-q", "-rs",
        *[str(bundle / name) for name in contents["tests"]],
    ]  # fmt: skip
    # Its output goes to stderr: the host sees the connection alive and keeps stdout for the selftest's one JSON line.
    child = subprocess.Popen(command, cwd=release, env=env, stdout=sys.stderr, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        _, stderr = child.communicate(timeout=deadline_s)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)  # pytest and whatever its tests started
        child.communicate()
        tests = parse_junit(junit) if junit.is_file() else []
        return {**check, "tests": tests, "status": FAIL, "detail": f"the gpu tests did not finish within their deadline of {deadline_s:g} s ({how})"}
    sys.stderr.write(stderr)
    if not junit.is_file():
        tail = " ".join(stderr.strip().splitlines()[-3:])[-400:]
        return {**check, "status": FAIL, "detail": f"pytest wrote no JUnit XML (exit code {child.returncode}): {tail}"}
    tests = parse_junit(junit)
    status, detail = _judge(tests, child.returncode, " ".join(stderr.strip().splitlines()[-3:])[-400:], how)
    return {**check, "tests": tests, "junit": JUNIT, "status": status, "detail": detail}
