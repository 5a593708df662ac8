"""Deploy to test hosts with their own addresses (network namespaces): a fleet with one host off the
network, and a cable pulled mid-upload. Needs root (CI runs as root)."""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from pathlib import Path

import pytest

from sdk.errors import SdkError
from sdk.release import ReleaseManifest
from tests.conftest import PIPELINE, tiny_yolo
from tests.tools.netns import NamespaceHost, namespaces_available
from tools.deploy.flow import Deploy
from tools.targets.sim import SimServer

pytestmark = [
    pytest.mark.skipif(
        not namespaces_available() and not os.environ.get("CI"), reason="network namespaces need root and iproute2 (apt-get install iproute2)"
    ),
    pytest.mark.xdist_group("netns"),  # the hosts' addresses (10.231.N.0/30) are the machine's: one worker runs these tests
]


def pipeline(tmp_path: Path, media: str | None = None) -> Path:
    """The tiny real pipeline (tests/conftest.py's ONNX model, run by ONNX Runtime) on a synthetic camera, or with
    `media`, on that file of its folder (sent with the release). What these cases prove is the link, the store and the
    fleet: every deploy is still the whole deploy (lease, probe, upload, trial with its health run, commit, measured
    run) without the example's model upload and load (decision 1175)."""
    folder = tmp_path / "pipeline"
    if not folder.exists():
        (folder / "assets").mkdir(parents=True)
        tiny_yolo(folder / "tiny.onnx")
    uri = f"file://assets/{media}" if media else "synthetic://boxes?width=64&height=48&frames=30"
    (folder / "p.yaml").write_text(PIPELINE.format(uri=uri, rate="null", max_ms=5000))
    return folder / "p.yaml"


def current(root: Path) -> ReleaseManifest:
    folder = (root / "current").resolve()
    manifest = ReleaseManifest.load(folder)
    manifest.verify(folder)
    return manifest


@pytest.fixture()
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("SDK_TARGETS_DIR", str(tmp_path / "targets"))
    monkeypatch.setenv("SDK_STATE_DIR", str(tmp_path / "state"))
    return tmp_path


FAST = {"connect_s": 3, "command_s": 8, "deadline_s": 120, "keepalive_s": 1}


@pytest.mark.slow
def test_a_fleet_of_four_hosts_with_one_off_the_network(env):
    hosts = [NamespaceHost(k) for k in range(4)]
    servers = []
    try:
        for k, host in enumerate(hosts):
            host.__enter__()
            server = SimServer(env / f"h{k}", port=22, address=host.address, netns=host.name).start()
            servers.append(server)
            (env / f"root{k}").mkdir()
            server.write_target(env / "targets" / f"orin-0{k + 1}.yaml", remote_root=str(env / f"root{k}"), timeouts=FAST)
        hosts[2].link(up=False)  # orin-03 is unplugged
        (env / "targets" / "groups.yaml").write_text("vehicles: [orin-01, orin-02, orin-03, orin-04]\n")
        started = time.monotonic()
        result = Deploy(pipeline(env), "vehicles", frames=2, report_dir=env / "fleet", parallel=4)()
        outcomes = {o.target: o for o in result.outcomes}
        assert any(text in outcomes["orin-03"].error for text in ("cannot connect", "handshake failed", "timed out")), outcomes["orin-03"]
        for name in ("orin-01", "orin-02", "orin-04"):
            assert outcomes[name].error is None and outcomes[name].verdict, outcomes[name]
        assert list(json.loads((env / "fleet" / "fleet.json").read_text())["errors"]) == ["orin-03"]
        assert result.exit_code == 1
        assert time.monotonic() - started < 300  # a hang guard: the fleet took 45 s at load 14
        releases = {current(env / f"root{k}").release_id for k in (0, 1, 3)}
        assert len(releases) == 1  # the same release everywhere it could go
        assert not (env / "root2" / "current").exists()
    finally:
        for server in servers:
            server.stop()
        for host in hosts:
            host.__exit__()


@pytest.mark.slow
def test_a_cable_pulled_mid_upload_keeps_the_old_release_and_the_retry_resumes(env):
    with NamespaceHost(10) as host:
        server = SimServer(env / "h", port=22, address=host.address, netns=host.name).start()
        try:
            root = env / "root"
            root.mkdir()
            server.write_target(env / "targets" / "orin-01.yaml", remote_root=str(root), timeouts=FAST)
            good = Deploy(pipeline(env), "orin-01", frames=2, report_dir=env / "r")()
            big = env / "pipeline" / "assets" / "big.avi"
            big.write_bytes(os.urandom(60_000_000))
            digest = hashlib.sha256(big.read_bytes()).hexdigest()
            partial = root / "store" / f".upload-{digest}"

            pulled = threading.Event()

            def pull_the_cable() -> None:
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline:
                    try:
                        size = partial.stat().st_size
                    except FileNotFoundError:
                        size = 0
                    if size > 5_000_000:
                        host.link(up=False)
                        pulled.set()
                        return
                    time.sleep(0.002)

            puller = threading.Thread(target=pull_the_cable)
            puller.start()
            started = time.monotonic()
            with pytest.raises(SdkError):
                Deploy(pipeline(env, "big.avi"), "orin-01", frames=2, report_dir=env / "r")()
            puller.join()
            assert pulled.is_set(), "the upload finished before the cable could be pulled"
            assert time.monotonic() - started < 60  # a dead link is noticed within the timeouts
            assert current(root).release_id == good.staged.release_id
            already = partial.stat().st_size
            assert 5_000_000 < already < 60_000_000
            host.link(up=True)
            with pytest.raises(SdkError, match="health check"):  # random bytes are no video; the upload itself completes
                Deploy(pipeline(env, "big.avi"), "orin-01", frames=2, report_dir=env / "r")()
            assert (root / "store" / digest).stat().st_size == 60_000_000 and not partial.exists()
            assert current(root).release_id == good.staged.release_id
        finally:
            server.stop()
