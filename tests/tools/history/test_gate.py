"""The pytest plugin's regression gate in a real pytest run: a release with a planted slowdown fails the CI job against
the release before it; the same release again passes; without a baseline the gate is skipped."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from tests.tools.history.conftest import SLOW_MS, plugin_pipeline
from tests.tools.validation.test_pytest_plugin import REPO, outcomes, pytest_command

GATE = "test_no_regression_beyond_the_tolerance"


def suite(pipeline: Path, out: Path, *extra: str) -> tuple[subprocess.CompletedProcess, dict]:
    from xml.etree import ElementTree

    command = [*pytest_command(), "--pipeline", str(pipeline), "--target", "local", "--frames", "200"]
    command += ["--acceptance-report-dir", str(out / "report"), "--junitxml", str(out / "suite.xml"), "-k", GATE, *extra]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300, env=os.environ.copy())
    return done, outcomes(ElementTree.parse(out / "suite.xml").getroot())


def test_the_gate_fails_only_on_a_detectable_regression_beyond_the_tolerance(history_runs, tmp_path, monkeypatch):
    shutil.copytree(history_runs.folder / "state", tmp_path / "state", symlinks=True)
    monkeypatch.setenv("SDK_STATE_DIR", str(tmp_path / "state"))
    slow = plugin_pipeline(tmp_path / "p", SLOW_MS)  # release R2's file: the slowdown planted in its decoder
    done, results = suite(slow, tmp_path / "slow", "--baseline", "last-committed", "--max-regression", "5%")
    assert done.returncode == 1 and results == {GATE: "failed"}, done.stdout[-3000:]
    assert f"against release {history_runs.r1}" in done.stdout and "stages.postprocess.p50_ms" in done.stdout
    assert "beyond the tolerance" in done.stdout
    fast = plugin_pipeline(tmp_path / "p", 0.0)  # release R1's file again
    done, results = suite(fast, tmp_path / "fast", "--baseline", history_runs.r1, "--max-regression", "5%")
    assert done.returncode == 0 and results == {GATE: "passed"}, done.stdout[-3000:]
    done, results = suite(fast, tmp_path / "none")
    assert done.returncode == 0 and results == {GATE: "skipped"}
