"""Ctrl-C in the middle of a deploy, as a person presses it: the command ends with exit 130, says what state the target
was left in and how to check it, and that is what the target holds (the interrupted trial never committed)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from tests.conftest import REPO

CLI = "import sys; from tools.cli import run; sys.exit(run(sys.argv[1:]))"


def test_ctrl_c_during_a_deploy_says_what_the_target_was_left_in(tiny_pipeline, tmp_path, state_dir):
    pipeline, _ = tiny_pipeline(rate=30, uri="synthetic://boxes?width=64&height=48&frames=100000")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-c", CLI, "deploy", "--target", "local", str(pipeline.path), "--report-dir", str(tmp_path / "r")]
    # Its own process group with SIGINT restored: a shell's background job (and so a test's child) ignores SIGINT.
    child = subprocess.Popen(
        command, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        process_group=0, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        trial = state_dir / "targets" / "local" / "trial.json"
        while not trial.exists() and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)  # pressed while the device's trial runs: the worst moment for a host to go away
        os.killpg(child.pid, signal.SIGINT)
        out, err = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
    assert child.returncode == 130, (out, err)
    lines = err.strip().splitlines()
    assert lines[-2] == "error: interrupted" and lines[-1].startswith("hint: nothing half-done runs on local"), err
    assert "sdk status --target local" in lines[-1] and "Traceback" not in err
    status = subprocess.run(
        [sys.executable, "-c", CLI, "status", "--target", "local", "--json"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300
    )  # fmt: skip
    assert status.returncode == 0, status.stderr
    answer = json.loads(status.stdout)
    assert answer["committed"] is None, answer  # the interrupted trial never became what starts
    assert answer["trial"] is None or answer["trial"]["release"] != answer["committed"], answer  # rolled back by the next start or deploy
