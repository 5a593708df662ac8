"""`sdk start|status|logs|stop --target T`, locally and over real SSH, on a deployed tiny pipeline."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tools.deploy import Deploy

REPO = Path(__file__).resolve().parents[2]
SERVICE = "\nservice: {watchdog_s: 2.0, status_interval_s: 0.2, stop_timeout_s: 5}\n"


def sdk(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "400"}
    return subprocess.run(
        [sys.executable, "-c", "from tools.cli import main; main()", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )


def run_service_cycle(target: str) -> None:
    started = sdk("start", "--target", target)
    assert started.returncode == 0, started.stderr
    state = json.loads(started.stdout)
    assert state["running"] and state["supervisor"]["state"] == "running"
    status = json.loads(sdk("status", "--target", target).stdout)
    assert status["current"] and status["service"]["running"] and status["service"]["runtime"]["state"] in ("NOMINAL", "STARTING")
    stopped = sdk("stop", "--target", target)
    assert stopped.returncode == 0, stopped.stderr
    assert json.loads(stopped.stdout)["runtime"]["state"] == "STOPPED"
    logs = sdk("logs", "--target", target, "--lines", "20")
    assert logs.returncode == 0
    again = sdk("stop", "--target", target)
    assert json.loads(again.stdout)["note"] == "not running"


def long_running(tiny_pipeline) -> Path:
    pipeline, _ = tiny_pipeline(rate=30, uri="synthetic://boxes?width=64&height=48&frames=100000")
    pipeline.path.write_text(pipeline.path.read_text() + SERVICE)
    return pipeline.path


@pytest.mark.slow
def test_service_commands_on_the_local_target(tiny_pipeline, tmp_path, state_dir):
    refused = sdk("start", "--target", "local")
    assert refused.returncode == 1 and "no release has passed its health check" in refused.stderr
    path = long_running(tiny_pipeline)
    Deploy(path, "local", frames=3, report_dir=tmp_path / "r")()
    unit = state_dir / "targets" / "local" / "service" / "perception-tiny.service"
    assert "WatchdogSec=2" in unit.read_text()  # the deploy rendered the unit of the release it committed
    run_service_cycle("local")


@pytest.mark.slow
def test_a_deploy_pauses_the_running_service_and_restarts_it_on_the_new_release(tiny_pipeline, tmp_path, state_dir):
    path = long_running(tiny_pipeline)
    first = Deploy(path, "local", frames=3, report_dir=tmp_path / "r1")()
    assert sdk("start", "--target", "local").returncode == 0
    before = json.loads(sdk("status", "--target", "local").stdout)["service"]
    path.write_text(path.read_text() + "# a new release\n")
    second = Deploy(path, "local", frames=3, report_dir=tmp_path / "r2")()
    assert second.staged.release_id != first.staged.release_id
    after = json.loads(sdk("status", "--target", "local").stdout)["service"]
    assert after["running"] and after["supervisor_pid"] != before["supervisor_pid"]
    assert after["supervisor"]["release"].endswith(second.staged.release_id)
    assert sdk("stop", "--target", "local").returncode == 0


@pytest.mark.slow
def test_service_commands_over_real_ssh(tiny_pipeline, tmp_path, ssh_target):
    Deploy(long_running(tiny_pipeline), ssh_target.name, frames=3, report_dir=tmp_path / "r")()
    assert "Type=notify" in (ssh_target.root / "service" / "perception-tiny.service").read_text()
    run_service_cycle(ssh_target.name)
