"""The pytest plugin and the ready-made acceptance module, run as a team would: a real pytest process."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path
from xml.etree import ElementTree

import pytest

from sdk.spec import load_pipeline
from tests.junit_check import validate_junit
from tools.validation.pytest_plugin import declared_checks

from .test_validate import relaxed_example

REPO = Path(__file__).resolve().parents[3]
TEAM_TESTS = 3  # tests/acceptance/test_team_requirements.py
GATE = "test_no_regression_beyond_the_tolerance"  # tests/acceptance/test_regression_gate.py: skipped without --baseline


def pytest_command(basetemp: Path, autoload: bool = True) -> list[str]:
    """`pytest tests/acceptance` in a process of its own, its temporary folders under `basetemp` (a test's own). Without
    --basetemp pytest numbers a folder in the machine's shared temporary root and, at exit, deletes every ended run's
    folder there: a child of this suite once spent its 120 s deleting gigabytes an earlier run left. Installed, the
    plugin is a pytest11 entry point, loaded as every installed plugin is (`autoload`: labgrid's beside it,
    tests/tools/connect/test_labgrid.py); from a bare checkout it is named with -p. Without `autoload` (run it with
    `pytest_env()`) only this plugin is named, and xdist for the project's addopts (`--dist`): the other installed
    plugins' imports (labgrid, hypothesis...) cost each run 1.3 of its 2.7 CPU-seconds of start."""
    basetemp.parent.mkdir(parents=True, exist_ok=True)  # pytest makes the folder itself, not its parents
    registered = any(e.value == "tools.validation.pytest_plugin" for e in entry_points(group="pytest11"))
    plugin = [] if registered and autoload else ["-p", "tools.validation.pytest_plugin"]
    plugin += [] if autoload else ["-p", "xdist.plugin"]
    return [sys.executable, "-m", "pytest", *plugin, "-p", "no:cacheprovider", "--basetemp", str(basetemp), "tests/acceptance", "-q"]


def pytest_env() -> dict[str, str]:
    """The environment for `pytest_command(autoload=False)`."""
    return {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}


def acceptance_suite(pipeline: Path, target: str, out: Path, *extra: str) -> tuple[subprocess.CompletedProcess, ElementTree.Element]:
    command = [*pytest_command(out / "tmp", autoload=False), "--pipeline", str(pipeline), "--target", target]
    command += ["--acceptance-report-dir", str(out / "report"), "--junitxml", str(out / "suite.xml")]
    done = subprocess.run([*command, *extra], cwd=REPO, capture_output=True, text=True, timeout=300, env=pytest_env())
    validate_junit(out / "suite.xml")  # pytest's own JUnit, with the run's properties, is valid too
    return done, ElementTree.parse(out / "suite.xml").getroot()


def outcomes(suite: ElementTree.Element) -> dict[str, str]:
    result = {}
    for case in suite.iter("testcase"):
        state = (
            "failed"
            if case.find("failure") is not None or case.find("error") is not None
            else "skipped"
            if case.find("skipped") is not None
            else "passed"
        )
        result[case.get("name")] = state
    return result


@pytest.mark.slow
def test_acceptance_suite_on_the_local_target(tmp_path, state_dir, deployed_relaxed):
    """A release that meets its budgets passes every test; the run's properties reach pytest's own JUnit; a named report
    folder is never reused. (A budget no run can meet: over real SSH, below, whose suite deploys its release anyway.)"""
    # Its release already current (deployed once per run, conftest.py; copied here): the suite's deploy sends nothing.
    pipeline = deployed_relaxed(tmp_path / "p", state_dir)
    done, suite = acceptance_suite(pipeline, "local", tmp_path / "first", "--frames", "20")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    names = declared_checks(load_pipeline(pipeline).spec.budgets, 1)
    results = outcomes(suite)
    assert {f"test_budget[{name}]" for name in names} <= set(results) and len(results) == len(names) + TEAM_TESTS + 1
    assert results.pop(GATE) == "skipped"
    # The unreadable power mode (on_unmet: warn) is skipped with its reason, never a plain pass.
    assert results.pop("test_budget[environment.power_mode]") == "skipped" and set(results.values()) == {"passed"}
    props = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert props["verdict_detail"] == "PASS, 1 unverified" and props["run.target"] == "local" and props["run.started_at"]
    # A named report folder is never reused: the same one again is refused, in the CLI's words (before any deploy).
    done, _ = acceptance_suite(pipeline, "local", tmp_path / "first", "--frames", "20")
    assert done.returncode == 1 and "error: validation on local failed:" in done.stdout and "holds a report" in done.stdout


@pytest.mark.slow
def test_acceptance_suite_over_real_ssh(tmp_path, ssh_target, prepared_example):
    """The suite deploys its release to the simulated device over a real sshd and validates it there. A budget no run
    can meet fails its own test, by name, with the numbers; one the run is too short to back (a p99 on 15 frames)
    fails too, naming the frames it needs; every other budget and the team's tests pass, the unreadable power mode is
    skipped. (One run: a second over SSH for an all-passing verdict would repeat the deploy and the mapping from a
    report to the tests' outcomes, which the local target's run above shows passing.)"""
    pipeline = relaxed_example(tmp_path / "p")
    # The example's model, prepared once per session (tests/conftest.py), in the host cache the suite's deploy reads (the
    # same key): the subject is the suite over SSH, not preparing (tests/tools/models/ is).
    shutil.copytree(prepared_example.folder, ssh_target.state / "cache" / "prepared" / prepared_example.folder.name)
    pipeline.write_text(pipeline.read_text().replace("end_to_end: {p50_ms: 60000", "end_to_end: {p50_ms: 0.001, p99_ms: 60000"))
    done, suite = acceptance_suite(pipeline, ssh_target.name, tmp_path, "--frames", "20")
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-2000:]
    results = outcomes(suite)
    assert [name for name, state in results.items() if state == "failed"] == ["test_budget[end_to_end.p50_ms]", "test_budget[end_to_end.p99_ms]"]
    assert "end_to_end.p50_ms: FAIL: measured" in done.stdout and "limit 0.001 ms" in done.stdout
    assert "end_to_end.p99_ms: INCONCLUSIVE" in done.stdout and "299 frames needed" in done.stdout
    assert results.pop(GATE) == "skipped" and results.pop("test_budget[environment.power_mode]") == "skipped"
    assert {state for name, state in results.items() if not name.startswith("test_budget[end_to_end.p")} == {"passed"}
    names = declared_checks(load_pipeline(pipeline).spec.budgets, 1)
    assert len(results) == len(names) - 1 + TEAM_TESTS  # every declared budget and the team's tests ran
    report = (tmp_path / "report" / "report.json").read_text()
    assert '"target": "sim"' in report and (tmp_path / "report" / "report.html").is_file()


def test_without_a_pipeline_the_suite_skips(tmp_path):
    command = [*pytest_command(tmp_path / "tmp", autoload=False), "-rs"]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120, env=pytest_env())
    assert done.returncode == 0 and "skipped" in done.stdout and "no --pipeline given" in done.stdout


def test_a_user_error_is_said_like_the_cli_says_it(tmp_path):
    missing = tmp_path / "nope.yaml"
    command = [*pytest_command(tmp_path / "tmp", autoload=False), "--pipeline", str(missing)]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120, env=pytest_env())
    assert done.returncode == 4  # pytest's usage error
    lines = done.stderr.splitlines()
    assert lines[0].startswith("error: ") and str(missing) in lines[0] and lines[1].startswith("hint: ")
    assert "Traceback" not in done.stderr + done.stdout and "_pytest" not in done.stderr
