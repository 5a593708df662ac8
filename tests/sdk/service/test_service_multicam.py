"""Several cameras in the runtime service, as real processes: an unplugged camera makes the service DEGRADED
naming that camera, the other keeps delivering frames, and the unplugged one comes back with the reconnect backoff."""

from __future__ import annotations

import pytest

from tests.sdk.service.service_helpers import CAMERA, copy_store, read_json, reap, service, wait_for

LIVE = "synthetic://boxes?width=64&height=48&frames=100000&live=1&fps=30"
SOURCE = f'source:\n  uri: "{CAMERA}"\n  replay: {{rate_fps: 30}}\n'
SOURCES = (
    "sources:\n"
    f'  front: {{uri: "{LIVE}"}}\n'
    f'  rear: {{uri: "{LIVE}&unplug_at=10&unplug_ms=3000", reconnect: {{initial_backoff_s: 0.1, max_backoff_s: 0.5}}}}\n'
)


@pytest.fixture()
def deployed(deployed_service):
    return deployed_service


def test_an_unplugged_camera_is_degraded_by_name_while_the_other_runs(deployed, tmp_path):
    store = copy_store(deployed, tmp_path / "store", (SOURCE, SOURCES), ("watchdog_s: 1.0", "watchdog_s: 2.0"))
    folder = store.root / "service"
    try:
        service(store.root, "start", "--wait", "60")
        seen = []

        def degraded():
            status = read_json(folder / "status.json")
            seen.append(status)
            conditions = status.get("conditions") or []
            return status.get("state") == "DEGRADED" and any(c.startswith("camera rear reconnecting") for c in conditions) and status

        first = wait_for(degraded, 30, "DEGRADED naming the rear camera")
        # The front camera keeps the frames coming while the rear one is away.
        later = wait_for(lambda: (s := read_json(folder / "status.json")).get("frames", 0) >= first["frames"] + 30 and s, 10, "front frames")
        assert any(c.startswith("camera rear") for c in later.get("conditions") or []) or later["disconnects"] == 1
        back = wait_for(
            lambda: (s := read_json(folder / "status.json")).get("state") == "NOMINAL" and s.get("disconnects") == 1 and s, 30, "rear back"
        )
        assert not back.get("conditions")
        assert read_json(folder / "supervisor.json")["restarts"] == 0
        service(store.root, "stop")
    finally:
        reap(str(store.root))
