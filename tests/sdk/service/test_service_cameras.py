"""Cameras and the watchdog agree, as real processes: an unplug shorter or longer than the watchdog is a
reconnect, an absent camera is waited for (DEGRADED, not failed), a live stream that ends is a fault
and a recording that ends is not."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.sdk.service.service_helpers import CAMERA, copy_store, read_json, reap, service, wait_for

LIVE = "synthetic://boxes?width=64&height=48&frames=100000&live=1&fps=30"


@pytest.fixture()
def deployed(deployed_service) -> Path:
    return deployed_service


@pytest.mark.parametrize("unplug_ms", [500, 3000])
def test_an_unplug_shorter_or_longer_than_the_watchdog_is_a_reconnect_not_a_kill(deployed, tmp_path, unplug_ms):
    unplugged = (CAMERA, f"{LIVE}&unplug_at=10&unplug_ms={unplug_ms}")
    store = copy_store(deployed, tmp_path / "store", unplugged, ("watchdog_s: 1.0", "watchdog_s: 2.0"))  # between the two
    folder = store.root / "service"
    try:
        started = service(store.root, "start", "--wait", "60")
        seen = []

        def resumed():
            status = read_json(folder / "status.json")
            seen.append(status)
            return status.get("disconnects") == 1 and status.get("frames", 0) >= 30 and status

        status = wait_for(resumed, 30, "frames after the reconnect")
        state = read_json(folder / "supervisor.json")
        assert state["restarts"] == 0 and state["child_pid"] == started["runtime_pid"] == status["pid"]
        if unplug_ms > 2000:  # while it was gone: DEGRADED, saying why
            assert any(s.get("state") == "DEGRADED" and "camera synthetic://boxes reconnecting" in s["conditions"][0] for s in seen)
        service(store.root, "stop")
    finally:
        reap(str(store.root))


def test_a_camera_absent_at_start_is_degraded_and_retried_not_failed(deployed, tmp_path):
    from sdk.service.control import status

    store = copy_store(deployed, tmp_path / "store", (CAMERA, f"{LIVE}&absent_ms=3000"))
    try:
        started = service(store.root, "start", "--wait", "60")
        assert started["started"]  # READY: the runtime is up and retrying
        missing = wait_for(lambda: (s := status(store.root / "service"))["state"] == "degraded" and s, 10, "degraded")
        assert missing["reason"].startswith("camera synthetic://boxes missing")
        wait_for(lambda: (s := read_json(store.root / "service" / "status.json")).get("frames", 0) >= 10 and s["state"] == "NOMINAL", 20, "frames")
        assert read_json(store.root / "service" / "supervisor.json")["restarts"] == 0
        service(store.root, "stop")
    finally:
        reap(str(store.root))


def test_a_live_stream_that_ends_is_restarted_a_recording_that_ends_is_not(deployed, tmp_path):
    ends = (CAMERA, LIVE.replace("frames=100000", "frames=15"))
    live = copy_store(
        deployed,
        tmp_path / "live",
        ends,
        ("  replay: {rate_fps: 30}\n", "  replay: {rate_fps: 30}\n  reconnect: null\n"),
        ("max_restarts: 3", "max_restarts: 1"),
    )
    replay = copy_store(deployed, tmp_path / "replay", (CAMERA, CAMERA.replace("frames=100000", "frames=15")))
    try:
        outcomes = {}
        for name, store in (("live", live), ("replay", replay)):
            release, folder = store.release_dir(store.committed()), store.root / "service"
            command = [sys.executable, "-m", "sdk", "supervise", "--release", str(release), "--status-dir", str(folder)]
            done = subprocess.run(command, cwd=release, capture_output=True, text=True, timeout=120)
            outcomes[name] = (done.returncode, read_json(folder / "supervisor.json"), read_json(folder / "status.json"), folder)
    finally:
        reap(str(tmp_path))
    code, state, status, folder = outcomes["live"]
    assert code == 1 and state["state"] == "failed" and state["restarts"] == 1 and "last: failed with status 1" in state["last_reason"]
    assert status["state"] == "FAILED" and status["last_error"] == "the live source ended: synthetic://boxes"
    log = (folder / "service.log").read_text().splitlines()
    assert log.count("error: the live source ended: synthetic://boxes") == 2, log  # each run's error line, as it said it
    ended = [line for line in log if "] ended (FAILED): the live source ended: synthetic://boxes" in line and "[runtime " in line]
    assert len(ended) == 2, log  # and the runtime's own line on its end
    code, state, status, _ = outcomes["replay"]
    assert code == 0 and state["state"] == "stopped" and state["restarts"] == 0
    assert status["state"] == "STOPPED" and status["reason"] == "the source ended" and status["frames"] == 15
