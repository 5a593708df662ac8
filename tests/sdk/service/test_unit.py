"""The locked-down systemd unit: systemd's own analysers on the rendered unit, the pipeline's policy in it,
one unit per pipeline (another pipeline's release is never started by it), and the one root step."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sdk.errors import ConfigError
from sdk.service.install import plan, stale_links
from sdk.service.unit import EXIT_OTHER_PIPELINE, render_unit, unit_name
from tests.sdk.service.service_helpers import copy_store, service

REPO = Path(__file__).resolve().parents[3]
ANALYZE = shutil.which("systemd-analyze")
needs_systemd = pytest.mark.skipif(ANALYZE is None, reason="systemd-analyze is not installed here (Debian package: systemd)")


def variant(spec, source: str | None = None, backend: str | None = None, dla: dict | None = None, **service):
    """The example pipeline's spec with another source, backend or `service` keys, validated as a file would be."""
    data = spec.model_dump(mode="json")
    if source:
        data["source"]["uri"] = source
    if backend:
        data["model"]["backend"] = backend
    if dla:
        data["model"]["dla"] = dla
    data["service"].update(service)
    return type(spec).model_validate(data)


def render(spec, root: str = "/opt/perception") -> str:
    return render_unit(spec, root=root, python=sys.executable, sdk_path=str(REPO), group="nvidia")


def settings(text: str, key: str) -> list[str]:
    return [line.partition("=")[2] for line in text.splitlines() if line.startswith(key + "=")]


def exposure(path: Path) -> float:
    done = subprocess.run([ANALYZE, "security", "--offline=true", str(path)], capture_output=True, text=True, timeout=120)
    found = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", done.stdout + done.stderr)
    assert found, done.stdout + done.stderr
    return float(found.group(1))


VARIANTS = {
    "example (auto backend: GPU nodes)": {},
    "CPU only, recorded clip": {"backend": "onnxruntime"},
    "V4L2 camera, real-time, locked memory, UDP heartbeat": {
        "source": "v4l2:///dev/video0",
        "realtime_priority": 50,
        "lock_memory": True,
        "heartbeat_udp": "10.0.0.2:9000",
    },
    "CSI camera on DLA core 1": {"source": "csi://0", "backend": "tensorrt", "dla": {"core": 1}},
    "store in the login's home": {"root": "/home/nvidia/perception"},
}


@needs_systemd
@pytest.mark.parametrize("name", list(VARIANTS))
def test_the_unit_is_verified_scores_at_most_3_and_does_not_run_as_root(name, example_pipeline, tmp_path):
    options = dict(VARIANTS[name])
    root = options.pop("root", str(tmp_path / "root 1"))
    text = render(variant(example_pipeline.spec, **options), root=root)
    path = tmp_path / unit_name("pedestrian")
    path.write_text(text)
    done = subprocess.run([ANALYZE, "verify", str(path)], capture_output=True, text=True, timeout=120)
    problems = [line for line in done.stderr.splitlines() if str(path) in line or "perception-pedestrian" in line]
    assert done.returncode == 0 and not problems, done.stderr
    assert exposure(path) <= 3.0
    assert settings(text, "User") == ["perception"] and "root" not in settings(text, "User")
    assert settings(text, "NoNewPrivileges") == ["yes"] and settings(text, "ProtectSystem") == ["strict"]
    assert settings(text, "ReadWritePaths") == [f'"{root}/service"' if " " in root else f"{root}/service"]
    assert settings(text, "PrivateTmp") == ["yes"] and settings(text, "UMask") == ["0007"]


def test_devices_are_those_the_source_and_backend_open(example_pipeline):
    cpu = render(variant(example_pipeline.spec, backend="onnxruntime"))
    assert settings(cpu, "PrivateDevices") == ["yes"] and not settings(cpu, "DeviceAllow")
    assert settings(cpu, "PrivateNetwork") == ["yes"] and settings(cpu, "RestrictAddressFamilies") == ["AF_UNIX"]
    camera = render(variant(example_pipeline.spec, source="v4l2:///dev/video0", backend="onnxruntime"))
    assert settings(camera, "PrivateDevices") == ["no"] and settings(camera, "DevicePolicy") == ["closed"]
    assert settings(camera, "DeviceAllow") == ["char-video4linux rw"]  # any /dev/videoN: a replugged camera may change number
    gpu = settings(render(example_pipeline.spec), "DeviceAllow")  # backend auto: TensorRT where an engine was built
    assert {"/dev/nvmap rw", "/dev/nvhost-ctrl-gpu rw", "/dev/nvhost-gpu rw", "/dev/nvgpu/igpu0/ctrl rw"} <= set(gpu)
    assert "char-video4linux rw" not in gpu  # a recorded clip opens no camera
    csi = render(variant(example_pipeline.spec, source="csi://0", dla={"core": 1}))
    assert {"/dev/nvhost-nvdla1 rw", "/dev/nvhost-vi rw", "char-video4linux rw"} <= set(settings(csi, "DeviceAllow"))
    assert "/dev/nvhost-nvdla0 rw" not in settings(csi, "DeviceAllow") and settings(csi, "BindPaths") == ["-/tmp/argus_socket"]
    network = render(variant(example_pipeline.spec, heartbeat_udp="10.0.0.2:9000"))
    assert settings(network, "RestrictAddressFamilies") == ["AF_UNIX AF_INET AF_INET6"] and not settings(network, "PrivateNetwork")


def test_capabilities_limits_and_the_failure_hook_come_from_the_pipeline(example_pipeline):
    plain = render(example_pipeline.spec)
    assert settings(plain, "CapabilityBoundingSet") == [""] and not settings(plain, "AmbientCapabilities")
    assert settings(plain, "RestrictRealtime") == ["yes"] and not settings(plain, "OnFailure")
    assert settings(plain, "MemoryMax") == ["4096M"] and settings(plain, "OOMScoreAdjust") == ["-500"]
    spec = variant(
        example_pipeline.spec,
        realtime_priority=50,
        lock_memory=True,
        memory_max_mb=1536,
        oom_score_adjust=-800,
        on_failure="vehicle-alert@%n.service",
    )
    tuned = render(spec)
    assert settings(tuned, "CapabilityBoundingSet") == ["CAP_SYS_NICE CAP_IPC_LOCK"] == settings(tuned, "AmbientCapabilities")
    assert settings(tuned, "RestrictRealtime") == ["no"] and settings(tuned, "LimitRTPRIO") == ["50"]
    assert settings(tuned, "LimitMEMLOCK") == ["infinity"] and settings(tuned, "MemoryMax") == ["1536M"]
    assert settings(tuned, "OOMScoreAdjust") == ["-800"] and settings(tuned, "OnFailure") == ["vehicle-alert@%n.service"]
    assert f'"--pipeline" "{example_pipeline.spec.name}"' in tuned and f"RestartPreventExitStatus={EXIT_OTHER_PIPELINE}" in tuned


@needs_systemd
def test_root_only_when_asked_with_the_reason_in_the_unit(example_pipeline, tmp_path):
    spec = variant(example_pipeline.spec, user="root", root_reason="the vendor's camera driver opens /dev/mem")
    text = render(spec)
    assert "# Runs as root: the vendor's camera driver opens /dev/mem" in text and settings(text, "User") == ["root"]
    assert settings(text, "CapabilityBoundingSet") == [""]  # root, but without root's capabilities
    path = tmp_path / unit_name("pedestrian")
    path.write_text(text)
    assert exposure(path) <= 3.0


def test_the_service_keys_are_bounded_at_load(tmp_path, example_pipeline):
    from sdk.spec import load_pipeline

    source = Path(example_pipeline.path).read_text()
    cases = {
        "  user: root\n": "user root needs a root_reason",
        "  memory_max_mb: 10\n": "memory_max_mb",
        "  oom_score_adjust: -2000\n": "oom_score_adjust",
        "  on_failure: 'rm -rf /'\n": "on_failure",
    }
    for line, expected in cases.items():
        path = tmp_path / "bad.yaml"
        path.write_text(source + "service:\n" + line)
        with pytest.raises(ConfigError) as caught:
            load_pipeline(path, check_files=False)
        assert expected in str(caught.value), str(caught.value)


def test_the_deploy_renders_one_unit_per_pipeline_and_removes_the_others(deployed_service, tmp_path):
    store = copy_store(deployed_service, tmp_path / "store")
    folder = store.root / "service"
    folder.mkdir(exist_ok=True)
    (folder / "perception-parking.service").write_text("[Unit]\n")  # a pipeline this store ran before
    result = service(store.root, "unit")
    assert Path(result["unit"]).name == "perception-tiny.service" and result["removed_units"] == ["perception-parking.service"]
    assert sorted(p.name for p in folder.glob("perception-*.service")) == ["perception-tiny.service"]
    assert result["user"] == "perception" and "install" in result["install"] and "sudo env PYTHONPATH=" in result["install"]
    text = Path(result["unit"]).read_text()
    assert f'"serve" "--root" "{store.root.resolve()}" "--pipeline" "tiny"' in text and "User=perception" in text


def test_the_unit_does_not_start_another_pipelines_release(deployed_service, tmp_path):
    """The store's committed release is `tiny`: a unit of `parking` exits 78 (not restarted) and starts nothing."""
    store = copy_store(deployed_service, tmp_path / "store")
    status_dir = store.root / "service"
    command = [sys.executable, "-m", "sdk", "serve", "--root", str(store.root), "--status-dir", str(status_dir), "--frames", "3"]
    done = subprocess.run([*command, "--pipeline", "parking"], capture_output=True, text=True, timeout=120)
    assert done.returncode == EXIT_OTHER_PIPELINE
    assert done.stderr.startswith("error: the committed release") and "runs pipeline 'tiny', not 'parking'" in done.stderr
    assert "Traceback" not in done.stderr and not (status_dir / "status.json").exists()
    done = subprocess.run([*command, "--pipeline", "tiny"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads((status_dir / "status.json").read_text())["pipeline"] == "tiny"


def test_the_root_step_creates_the_user_shares_the_folder_and_unlinks_removed_units(deployed_service, tmp_path):
    store = copy_store(deployed_service, tmp_path / "store")
    service(store.root, "unit")
    folder = (store.root / "service").resolve()
    systemd = tmp_path / "systemd"
    systemd.mkdir()
    os.symlink(folder / "perception-parking.service", systemd / "perception-parking.service")  # linked, its file since removed
    os.symlink(folder / "perception-tiny.service", systemd / "perception-tiny.service")
    os.symlink(tmp_path / "elsewhere.service", systemd / "perception-other-root.service")  # another store's: left alone
    assert stale_links(folder, systemd) == [systemd / "perception-parking.service"]
    commands = [" ".join(c) for c in plan(folder, folder / "perception-tiny.service", systemd)]
    group = Path(store.root).stat().st_gid
    unit = (folder / "perception-tiny.service").read_text()
    assert ("Group=" not in unit) if group == 0 else (f"Group={__import__('grp').getgrgid(group).gr_name}" in unit)  # never root's group
    import grp
    import pwd

    try:
        pwd.getpwnam("perception")
    except KeyError:
        useradd = commands[0]
        assert useradd.startswith("useradd --system --no-create-home") and "--shell /usr/sbin/nologin" in useradd
        if group == 0:  # a root-owned store: the service never joins root's group, it gets a group of its own
            assert "--user-group" in useradd and "--gid" not in useradd and useradd.endswith(" perception")
        else:
            assert f"--gid {grp.getgrgid(group).gr_name}" in useradd and useradd.endswith(" perception")
    assert f"chmod -R g+rwX {folder}" in commands and "systemctl disable --now perception-parking.service" in commands
    assert commands[-3:] == [
        f"systemctl link {folder}/perception-tiny.service",
        "systemctl enable perception-tiny.service",
        "systemctl restart perception-tiny.service",
    ]
    dry = service(store.root, "install", "--dry-run")
    assert dry["ran"] is False and dry["commands"][-1] == "systemctl restart perception-tiny.service"


def test_the_units_start_on_a_read_only_store_runs_the_committed_release_and_leaves_a_stale_trial(deployed_service, tmp_path):
    """Under ProtectSystem=strict the store is read-only to the unit: `serve --root` does not recover it, and still
    runs only the committed release (a release on trial when the power went never starts). A read-only bind
    mount stands in for systemd's."""
    from tests.sdk.service.service_helpers import unmount

    store = copy_store(deployed_service, tmp_path / "store")
    committed = store.committed()
    shutil.copytree(store.release_dir(committed), store.releases / "0123456789abcdef")  # the release on trial
    stale = {"release": "0123456789abcdef", "fallback": committed, "token": 99, "boot": "an earlier boot", "deadline": 0, "state": "running"}
    (store.root / "trial.json").write_text(json.dumps(stale))
    view = tmp_path / "read-only"
    view.mkdir()
    done = subprocess.run(["mount", "--bind", str(store.root), str(view)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot bind-mount here (root needed): {done.stderr.strip()}")
    try:
        assert subprocess.run(["mount", "-o", "remount,ro,bind", str(view)], capture_output=True).returncode == 0
        status_dir = tmp_path / "status"  # the unit's ReadWritePaths=, outside the read-only view here
        command = [sys.executable, "-m", "sdk", "serve", "--root", str(view), "--pipeline", "tiny", "--status-dir", str(status_dir)]
        done = subprocess.run([*command, "--frames", "3"], capture_output=True, text=True, timeout=120)
    finally:
        unmount(view)
    assert done.returncode == 0, done.stderr
    status = json.loads((status_dir / "status.json").read_text())
    assert status["release"] == committed and status["frames"] >= 1
    assert json.loads((store.root / "trial.json").read_text()) == stale  # left for the next deploy to roll back
