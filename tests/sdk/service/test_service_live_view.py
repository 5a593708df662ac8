"""The running service serves its pipeline's live view: a real WebSocket client receives its detections and its
state (NOMINAL) while it runs."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.sdk.service.service_helpers import copy_store, read_json, reap, service, wait_for
from tests.sdk.sinks.test_live_view import Client, connected


@pytest.fixture()
def deployed(deployed_service) -> Path:
    return deployed_service


def test_a_client_receives_the_running_services_detections_and_state(deployed, tmp_path):
    with socket.socket() as probe:  # a port free now (the service binds it a moment later)
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    store = copy_store(deployed, tmp_path / "store", ("  - {kind: null}\n", f"  - {{kind: foxglove, port: {port}, image_fps: 0}}\n"))
    folder = store.root / "service"
    try:
        service(store.root, "start", "--wait", "60")
        wait_for(lambda: read_json(folder / "status.json").get("frames", 0) >= 5, 20, "frames")
        with connected(port) as ws:
            client = Client(ws, topics=("/detections", "/status"))
            client.subscribe("/detections", "/status")
            got = client.receive({"/detections": 3, "/status": 1})
        service(store.root, "stop")
    finally:
        reap(str(store.root))
    assert [t.text for t in got["/detections"][0][1].texts] == ["person 0.81", "car 0.72"]  # the tiny model's boxes
    _, state = got["/status"][0]
    assert state["state"] == "NOMINAL" and state["frames"] > 0 and "window" in state  # the service's own health
