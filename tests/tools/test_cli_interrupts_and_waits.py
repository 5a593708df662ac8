"""Ctrl-C in the middle of a deploy, and a deploy that waits for another's lease, as a person meets them: an interrupted
command says what it left on the target and how to check it (and that is what the target holds: the interrupted trial
never committed); a wait says who holds the target and for how long at most it waits, when it begins."""

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


def test_a_deploy_waiting_for_the_lease_says_who_holds_it_and_how_long_it_waits(tiny_pipeline, tmp_path, state_dir):
    """Piped, a wait is said when it begins (not only when it ends): who holds the target and the most it waits."""
    import threading

    from sdk.store.objects import ReleaseStore

    pipeline, _ = tiny_pipeline(frames=6)
    holder = ReleaseStore(state_dir / "targets" / "local").acquire("a colleague's deploy", lease_s=600)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-c", CLI, "deploy", "--target", "local", str(pipeline.path), "--frames", "6", "--report-dir", str(tmp_path / "r")]
    child = subprocess.Popen(command, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    said = []
    timer = threading.Timer(280, child.kill)  # a hang fails the test, never the suite
    timer.start()
    try:
        for line in child.stderr:
            said.append(line)
            if "waiting for the deploy lease" in line:
                holder.end()  # the colleague's deploy finishes: this one goes on
        child.wait(timeout=60)
    finally:
        timer.cancel()
        holder.end()
        if child.poll() is None:
            child.kill()
            child.wait()
    text = "".join(said)
    assert "waiting for the deploy lease on local: held by a colleague's deploy (token " in text, text
    assert "for at most 70 s ..." in text and child.returncode in (0, 4), text
