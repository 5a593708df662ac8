"""The pytest plugin and the ready-made acceptance module, run as a team would: a real pytest process."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path
from xml.etree import ElementTree

import pytest

from sdk.spec import load_pipeline
from tools.pytest_plugin import declared_checks

from .test_validate import relaxed_example

REPO = Path(__file__).resolve().parents[3]
TEAM_TESTS = 3  # tests/acceptance/test_team_requirements.py


def acceptance_suite(pipeline: Path, target: str, out: Path, *extra: str) -> tuple[subprocess.CompletedProcess, ElementTree.Element]:
    # Installed, the plugin is a pytest11 entry point; from a bare checkout it is named with -p.
    registered = any(e.value == "tools.pytest_plugin" for e in entry_points(group="pytest11"))
    plugin = [] if registered else ["-p", "tools.pytest_plugin"]
    command = [sys.executable, "-m", "pytest", *plugin, "-p", "no:cacheprovider", "tests/acceptance", "-q"]
    command += ["--pipeline", str(pipeline), "--target", target, "--acceptance-report-dir", str(out / "report"), "--junitxml", str(out / "suite.xml")]
    done = subprocess.run([*command, *extra], cwd=REPO, capture_output=True, text=True, timeout=300, env=os.environ.copy())
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
def test_acceptance_suite_on_the_local_target(tmp_path, state_dir):
    pipeline = relaxed_example(tmp_path / "p")
    done, suite = acceptance_suite(pipeline, "local", tmp_path, "--frames", "20")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    names = declared_checks(load_pipeline(pipeline).spec.budgets, 1)
    results = outcomes(suite)
    assert {f"test_budget[{name}]" for name in names} <= set(results) and len(results) == len(names) + TEAM_TESTS
    assert set(results.values()) == {"passed"}
    # A budget no run can meet fails its own test, by name, with the numbers.
    strict = pipeline.read_text().replace("end_to_end: {p50_ms: 60000", "end_to_end: {p50_ms: 0.001")
    pipeline.write_text(strict)
    done, suite = acceptance_suite(pipeline, "local", tmp_path, "--frames", "20")
    assert done.returncode == 1
    results = outcomes(suite)
    assert [name for name, state in results.items() if state == "failed"] == ["test_budget[end_to_end.p50_ms]"]
    assert "end_to_end.p50_ms FAIL: measured" in done.stdout and "limit 0.001" in done.stdout


@pytest.mark.slow
def test_acceptance_suite_over_real_ssh(tmp_path, ssh_target):
    pipeline = relaxed_example(tmp_path / "p")
    done, suite = acceptance_suite(pipeline, ssh_target.name, tmp_path, "--frames", "15")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert set(outcomes(suite).values()) == {"passed"}
    report = (tmp_path / "report" / "report.json").read_text()
    assert '"target": "sim"' in report and (tmp_path / "report" / "report.html").is_file()


def test_without_a_pipeline_the_suite_skips(tmp_path):
    registered = any(e.value == "tools.pytest_plugin" for e in entry_points(group="pytest11"))
    plugin = [] if registered else ["-p", "tools.pytest_plugin"]
    command = [sys.executable, "-m", "pytest", *plugin, "-p", "no:cacheprovider", "tests/acceptance", "-q", "-rs"]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "skipped" in done.stdout and "no --pipeline given" in done.stdout
