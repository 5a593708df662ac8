"""The runtime as a service, as real processes: serve (systemd protocol), the supervisor, faults, stop."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sdk.store.objects import ReleaseStore
from tests.sdk.service.service_helpers import copy_store, relist

REPO = Path(__file__).resolve().parents[3]

# This file's service keys, edited into a committed release of the store that tests/sdk/service shares (one deploy
# for every test of the folder: the deploy is not what these tests are about).
EDITS = (("stop_timeout_s: 2", "stop_timeout_s: 5"), ("max_restarts: 3", "max_restarts: 2"))


@pytest.fixture()
def deployed(deployed_service, tmp_path, state_dir):
    """This test's own copy of that deployed store, and its committed release (this file's service keys)."""
    store = copy_store(deployed_service, tmp_path / "store", *EDITS)
    return store, store.release_dir(store.committed())


def wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def test_serve_notifies_ready_feeds_the_watchdog_and_stops_cleanly_on_sigterm(deployed, tmp_path):
    _, release = deployed
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listener.bind(str(tmp_path / "notify"))
    listener.settimeout(30)
    env = {**os.environ, "NOTIFY_SOCKET": str(tmp_path / "notify"), "WATCHDOG_USEC": "1000000"}
    status_dir = tmp_path / "status"
    command = [sys.executable, "-m", "sdk", "serve", "--release", str(release), "--status-dir", str(status_dir)]
    child = subprocess.Popen(command, cwd=release, env=env, stderr=subprocess.PIPE, text=True)
    try:
        messages = []
        while not any(m.startswith("READY=1") for m in messages):
            messages.append(listener.recv(4096).decode())
        started = time.monotonic()
        pings = 0
        while time.monotonic() - started < 2.0:
            pings += listener.recv(4096).decode() == "WATCHDOG=1"
        assert pings >= 3  # every half watchdog period while frames flow
        status = wait_for(lambda: read_json(status_dir / "status.json").get("frames", 0) > 20 and read_json(status_dir / "status.json"), 10, "frames")
        assert status["state"] == "NOMINAL" and status["pid"] == child.pid and status["release"] == release.name
        child.send_signal(signal.SIGTERM)
        stop_started = time.monotonic()
        assert child.wait(timeout=60) == 0, child.stderr.read()
        assert time.monotonic() - stop_started < 15  # 2.2 s at load 13; a runtime deaf to SIGTERM never stops
    finally:
        child.kill()
        listener.close()
    final = read_json(status_dir / "status.json")
    assert final["state"] == "STOPPED" and final["frames"] >= 20
    from sdk.sinks.files import finished_files

    files = finished_files(status_dir / "output" / "detections.jsonl")
    assert [f.name for f in files] == ["detections.000001.jsonl"]  # a service's outputs are numbered segments
    lines = files[0].read_text().splitlines()
    assert len(lines) >= final["frames"] - 1 and all(json.loads(line)["detections"] for line in lines)  # whole lines only
    (jsonl,) = [o for o in final["outputs"] if o["output"] == "detections.jsonl"]
    assert jsonl["written"] == len(lines) and jsonl["not_written"] == 0 and jsonl["synced_frame"] == json.loads(lines[-1])["frame"]
    assert not [p.name for p in (status_dir / "output").iterdir() if p.name.startswith(".")]  # no partial file left


def service(store: ReleaseStore, *args: str) -> dict:
    done = subprocess.run([sys.executable, "-m", "sdk", "service", "--root", str(store.root), *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_supervisor_restarts_a_killed_or_hung_runtime_and_stops_within_bound(deployed):
    store, _ = deployed
    folder = store.root / "service"
    started = service(store, "start", "--wait", "60")
    assert started["running"] and started["supervisor"]["state"] == "running"
    first_child = started["supervisor"]["child_pid"]
    assert service(store, "start")["note"] == "already running"
    # SIGKILL: a crash. The supervisor restarts it.
    os.kill(first_child, signal.SIGKILL)
    state = wait_for(lambda: (s := read_json(folder / "supervisor.json")).get("restarts") == 1 and s.get("state") == "running" and s, 30, "restart")
    assert state["child_pid"] != first_child and "status -9" in state["last_reason"]
    # SIGSTOP: a hang. No frames, no watchdog pings: killed after watchdog_s and restarted.
    os.kill(state["child_pid"], signal.SIGSTOP)
    state = wait_for(lambda: (s := read_json(folder / "supervisor.json")).get("restarts") == 2 and s.get("state") == "running" and s, 30, "watchdog")
    assert state["last_reason"].startswith("watchdog")
    runtime = wait_for(lambda: (s := read_json(folder / "status.json")).get("frames", 0) > 5 and s, 20, "frames after restart")
    assert runtime["state"] == "NOMINAL"
    stopped = service(store, "stop", "--wait", "10")
    assert stopped["stopped"] and not stopped["running"] and stopped["supervisor"]["state"] == "stopped"
    assert stopped["runtime"]["state"] == "STOPPED"
    log = service(store, "logs", "--lines", "50")
    assert log["lines"] is not None


def test_a_model_that_will_not_load_is_restarted_then_given_up(deployed, tmp_path):
    _, release = deployed
    broken = tmp_path / "broken"
    shutil.copytree(release, broken)  # a copy: the store's objects stay intact
    (broken / "artifacts" / "model.onnx").write_bytes(b"not an onnx model")
    status_dir = tmp_path / "status"
    command = [sys.executable, "-m", "sdk", "supervise", "--release", str(broken), "--status-dir", str(status_dir)]
    done = subprocess.run(command, cwd=broken, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    state = read_json(status_dir / "supervisor.json")
    assert state["state"] == "failed" and state["restarts"] == 2 and "failed with status 1" in state["last_reason"]
    runtime = read_json(status_dir / "status.json")
    assert runtime["state"] == "FAILED" and "model.onnx" in runtime["last_error"]
    assert runtime["reason"].startswith("gave up after 3 failures within 60 s") and runtime["ended_by"] == "supervisor"
    assert "error:" in (status_dir / "service.log").read_text()


def test_the_units_start_command_rolls_back_a_stale_trial_and_runs_the_committed_release(deployed, tmp_path):
    """What systemd runs at boot after a power cut mid-trial: ExecStart, word for word, without systemd."""
    import shlex

    store, release = deployed
    committed = store.committed()
    shutil.copytree(release, store.releases / "0123456789abcdef")  # stands in for the release on trial when the power went
    unit = Path(service(store, "unit")["unit"]).read_text()
    exec_start = next(line for line in unit.splitlines() if line.startswith("ExecStart=")).removeprefix("ExecStart=")
    environment = next(line for line in unit.splitlines() if line.startswith("Environment=") and "PYTHONPATH" in line)
    pythonpath = shlex.split(environment.removeprefix("Environment="))[0].removeprefix("PYTHONPATH=")
    stale = {"release": "0123456789abcdef", "fallback": committed, "token": 99, "boot": "an earlier boot", "deadline": 0, "state": "running"}
    (store.root / "trial.json").write_text(json.dumps(stale))
    os.replace(store.root / "current", store.root / "current.old")
    os.symlink("releases/0123456789abcdef", store.root / "current")  # the power went right after the switch
    argv = [part.replace("%%", "%") for part in shlex.split(exec_start)] + ["--frames", "5"]
    env = {**os.environ, "PYTHONPATH": pythonpath}
    done = subprocess.run(argv, cwd=store.root, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    status = json.loads((store.root / "service" / "status.json").read_text())
    assert status["release"] == committed and status["frames"] >= 1
    assert store.trial() is None and store.current() == committed
    assert "the device restarted during the trial" in store.status()["last_trial"]["reason"]


def test_the_vehicle_gets_the_status_as_udp_heartbeats(deployed, tmp_path):
    _, release = deployed
    listener = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    listener.bind(("127.0.0.1", 0))
    listener.settimeout(20)
    port = listener.getsockname()[1]
    copy = edited_release(release, tmp_path / "release", ("status_interval_s: 0.2", f"status_interval_s: 0.2\n  heartbeat_udp: 127.0.0.1:{port}"))
    command = [sys.executable, "-m", "sdk", "serve", "--release", str(copy), "--status-dir", str(tmp_path / "status"), "--frames", "60"]
    child = subprocess.Popen(command, cwd=copy, stderr=subprocess.PIPE, text=True)
    try:
        beats = [json.loads(listener.recv(65536)) for _ in range(3)]
    finally:
        assert child.wait(timeout=30) == 0, child.stderr.read()
        listener.close()
    assert {beat["pid"] for beat in beats} == {child.pid} and all(beat["pipeline"] == "tiny" for beat in beats)
    assert beats[-1]["frames"] >= beats[0]["frames"] and beats[-1]["state"] in ("STARTING", "NOMINAL", "STOPPED")


def edited_release(release: Path, folder: Path, *edits: tuple[str, str]) -> Path:
    """A copy of the release, outside the store, whose pipeline file has these (old, new) replacements and whose
    manifest lists the edited file (a start runs only bytes that match their manifest; the store stays intact)."""
    shutil.copytree(release, folder)
    (pipeline,) = (folder / "pipeline").glob("*.yaml")
    text = pipeline.read_text()
    for old, new in edits:
        assert old in text
        text = text.replace(old, new)
    pipeline.chmod(0o644)
    pipeline.write_text(text)
    relist(folder)
    return folder


def test_the_service_reconnects_a_pulled_camera_and_reports_it(deployed, tmp_path):
    _, release = deployed
    live = "synthetic://boxes?width=64&height=48&frames=100000&live=1&fps=60&unplug_at=20&unplug_ms=300"
    copy = edited_release(release, tmp_path / "release", ("synthetic://boxes?width=64&height=48&frames=100000", live))
    command = [sys.executable, "-m", "sdk", "serve", "--release", str(copy), "--status-dir", str(tmp_path / "status"), "--frames", "50"]
    done = subprocess.run(command, cwd=copy, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    status = read_json(tmp_path / "status" / "status.json")
    assert status["state"] == "STOPPED" and status["frames"] == 50 and status["disconnects"] == 1


def test_a_stalled_runtime_goes_degraded_sheds_frames_and_recovers(deployed, tmp_path):
    """SIGSTOP for 0.6 s is a stall of the whole process: the frames behind it miss their deadline."""
    _, release = deployed
    copy = edited_release(
        release,
        tmp_path / "release",
        ("budgets:\n", "budgets:\n  deadline_ms: 40\n"),
        ("status_interval_s: 0.2", "status_interval_s: 0.2\n  degraded: {after_misses: 3, recover_after: 10, process_every: 2}"),
    )
    status_dir = tmp_path / "status"
    command = [sys.executable, "-m", "sdk", "serve", "--release", str(copy), "--status-dir", str(status_dir), "--frames", "150"]
    child = subprocess.Popen(command, cwd=copy, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: read_json(status_dir / "status.json").get("frames", 0) > 20, 30, "frames")
        os.kill(child.pid, signal.SIGSTOP)
        time.sleep(0.6)
        os.kill(child.pid, signal.SIGCONT)
        assert child.wait(timeout=60) == 0, child.stderr.read()
    finally:
        child.kill()
    final = read_json(status_dir / "status.json")
    # STARTING -> NOMINAL -> DEGRADED -> NOMINAL -> STOPPED, with shed frames and the misses counted
    assert final["state"] == "STOPPED" and final["transitions"] >= 4 and final["shed"] > 0 and final["misses"] >= 3
    assert final["frames"] + final["shed"] >= 150
