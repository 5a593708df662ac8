"""The locked-down systemd unit: systemd's own analysers on the rendered unit, the pipeline's policy in it,
one unit per pipeline (another pipeline's release is never started by it), and the one root step."""

from __future__ import annotations

import grp
import json
import os
import pwd
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from sdk.errors import ConfigError
from sdk.service.install import plan, stale_units, write_root_unit
from sdk.service.unit import EXIT_OTHER_PIPELINE, render_unit, unit_name
from sdk.service.units import checked_unit
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
    assert exposure(path) <= (0.7 if name.startswith("example") else 3.0)  # the example's unit: "SAFE" at 0.7, and stays there
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


def test_the_deploy_renders_one_unit_per_pipeline_outside_the_services_folder(deployed_service, tmp_path):
    store = copy_store(deployed_service, tmp_path / "store")
    units = store.root / "units"
    units.mkdir(exist_ok=True)
    (units / "perception-parking.service").write_text("[Unit]\n")  # a pipeline this store ran before
    (store.root / "service").mkdir(exist_ok=True)
    (store.root / "service" / "perception-tiny.service").write_text("[Unit]\n")  # where earlier SDKs rendered it
    result = service(store.root, "unit")
    assert Path(result["unit"]) == units / "perception-tiny.service" and result["removed_units"] == ["perception-parking.service"]
    assert sorted(p.name for p in units.glob("perception-*.service")) == ["perception-tiny.service"]
    assert not list((store.root / "service").glob("*.service"))  # nothing systemd reads stays where the service writes
    assert stat.S_IMODE(units.stat().st_mode) == 0o755 and stat.S_IMODE(Path(result["unit"]).stat().st_mode) == 0o644
    assert result["user"] == "perception"
    assert result["install"].startswith(f"sudo /usr/local/sbin/perception-sdk-root service --root {store.root.resolve()} install")
    text = Path(result["unit"]).read_text()
    assert text.startswith(f"# perception-sdk store: {store.root.resolve()}\n[Unit]")
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


def test_the_root_step_creates_the_user_shares_the_folder_and_replaces_this_stores_other_units(deployed_service, tmp_path):
    store = copy_store(deployed_service, tmp_path / "store")
    service(store.root, "unit")
    folder = (store.root / "service").resolve()
    folder.mkdir(exist_ok=True)
    root = store.root.resolve()
    systemd = tmp_path / "systemd"
    systemd.mkdir()
    os.symlink(folder / "perception-parking.service", systemd / "perception-parking.service")  # an earlier SDK's link into the store
    (systemd / "perception-old.service").write_text(f"# perception-sdk store: {root}\n[Unit]\n")  # this store's, another pipeline
    (systemd / "perception-other-root.service").write_text("# perception-sdk store: /elsewhere\n[Unit]\n")  # another store's
    os.symlink(tmp_path / "elsewhere.service", systemd / "perception-linked-elsewhere.service")
    assert stale_units(root, "perception-tiny.service", systemd) == [systemd / "perception-old.service", systemd / "perception-parking.service"]
    group = Path(store.root).stat().st_gid
    name, text, _ = checked_unit(store, group=grp.getgrgid(group).gr_name if group else None)
    commands = [" ".join(c) for c in plan(store, folder, name, text, systemd)]
    assert ("Group=" not in text) if group == 0 else (f"Group={grp.getgrgid(group).gr_name}" in text)  # never root's group
    try:
        pwd.getpwnam("perception")
    except KeyError:
        useradd = commands[0]
        assert useradd.startswith("useradd --system --no-create-home") and "--shell /usr/sbin/nologin" in useradd
        if group == 0:  # a root-owned store: the service never joins root's group, it gets a group of its own
            assert "--user-group" in useradd and "--gid" not in useradd and useradd.endswith(" perception")
        else:
            assert f"--gid {grp.getgrgid(group).gr_name}" in useradd and useradd.endswith(" perception")
    assert f"share-folder {folder} {grp.getgrgid(group).gr_name if group else '-'}" in commands  # through descriptors, never chmod -R
    assert "systemctl disable --now perception-parking.service" in commands and "systemctl disable --now perception-old.service" in commands
    assert not [c for c in commands if "other-root" in c or "linked-elsewhere" in c]
    assert commands[-4:] == [
        f"write-unit {systemd}/perception-tiny.service",
        "systemctl daemon-reload",
        "systemctl enable perception-tiny.service",
        "systemctl restart perception-tiny.service",
    ]
    dry = service(store.root, "install", "--dry-run")
    assert dry["ran"] is False and dry["commands"][-1] == "systemctl restart perception-tiny.service"


def test_the_root_step_writes_roots_own_unit_in_place_of_whatever_was_there(tmp_path):
    destination = tmp_path / "perception-tiny.service"
    os.symlink(tmp_path / "a-file-the-service-may-write", destination)  # planted: systemd must never follow it
    write_root_unit(destination, "[Unit]\n")
    st = os.lstat(destination)
    assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o644 and (st.st_uid, st.st_gid) == (0, 0)
    assert destination.read_text() == "[Unit]\n" and not (tmp_path / "a-file-the-service-may-write").exists()


@pytest.fixture(scope="module")
def rendered(deployed_service, tmp_path_factory):
    """One copy of the deployed store, the unit its deploy rendered, and root's rendering of it (`install --dry-run`,
    which writes nothing): each case below edits that unit, checks root's rendering again, and puts the unit back."""
    store = copy_store(deployed_service, tmp_path_factory.mktemp("rendered") / "store")
    unit = Path(service(store.root, "unit")["unit"])
    before = service(store.root, "install", "--dry-run")
    assert "note" not in before and before["text"] == unit.read_text()
    return store, unit, before


@pytest.mark.parametrize(
    ("change", "planted"),
    [
        ("append", "ExecStartPre=+/bin/sh"),
        ("root", "User=root"),
        ("group", "Group=shadow"),
        ("python", "/tmp/the-logins-python"),
        ("writable", None),
    ],
)
def test_the_root_step_installs_its_own_rendering_whatever_the_deploy_rendered(rendered, change, planted):
    """The unit the deploy login rendered is a preview: root renders the committed release's unit with its own code and
    settings (User=, Group=, interpreter) and installs that; an edited preview changes nothing and is reported."""
    store, unit, before = rendered
    text, mode = unit.read_text(), stat.S_IMODE(unit.stat().st_mode)
    try:
        if change == "append":
            unit.write_text(text + "ExecStartPre=+/bin/sh -c 'chmod u+s /bin/sh'\n")
        elif change == "root":
            unit.write_text(text.replace("User=perception", "User=root"))
        elif change == "group":
            edited = re.sub(r"^Group=.*$", "Group=shadow", text, flags=re.M)
            unit.write_text(edited if "Group=" in text else text.replace("User=perception", "User=perception\nGroup=shadow"))
        elif change == "python":
            unit.write_text(re.sub(r'^ExecStart="[^"]+"', 'ExecStart="/tmp/the-logins-python"', text, flags=re.M))
        else:
            unit.chmod(0o666)
        assert unit.read_text() != text or change == "writable"
        after = service(store.root, "install", "--dry-run")
    finally:  # the deploy's rendering again, for the next case
        unit.write_text(text)
        unit.chmod(mode)
    assert after["text"] == before["text"] and (planted is None or planted not in after["text"])
    if change != "writable":
        assert "differs from root's rendering" in after["note"] and "root's is installed" in after["note"]


def test_a_pipeline_that_asks_for_root_needs_roots_own_yes(deployed_service, tmp_path):
    """service.user root is the deploy's wish; root's step grants it only with --allow-root."""
    wish = ("service:\n", "service:\n  user: root\n  root_reason: the camera driver needs it here\n")
    store = copy_store(deployed_service, tmp_path / "store", wish)
    done = service(store.root, "install", "--dry-run", check=False)
    assert done["returncode"] == 1 and "asks to run its service as root" in done["stderr"] and "--allow-root" in done["stderr"], done["stderr"]
    assert "Traceback" not in done["stderr"]
    allowed = service(store.root, "install", "--dry-run", "--allow-root")
    assert "User=root" in allowed["text"]


def test_the_service_user_cannot_write_the_unit_or_plant_another(deployed_service, tmp_path):
    """A real unprivileged process in the store owner's group, as the unit runs the service (uid nobody stands in for
    the service user): the kernel lets it write the status folder, never the rendered unit or its folder. It is
    handed the two folders as open descriptors (the test's own temporary folders are closed to other users)."""
    if os.geteuid() != 0:
        pytest.skip("switching to another user needs root")
    store = copy_store(deployed_service, tmp_path / "store")
    unit = Path(service(store.root, "unit")["unit"])
    gid = store.root.stat().st_gid
    status = store.root / "service"
    status.mkdir(exist_ok=True)
    status.chmod(0o2770)  # what the root step leaves: group-writable, setgid
    units_fd, status_fd = os.open(unit.parent, os.O_RDONLY), os.open(status, os.O_RDONLY)

    def as_the_service() -> None:
        os.setgid(gid)
        os.setgroups([gid])
        os.setuid(65534)

    script = (
        "import os, sys; units, status = int(sys.argv[1]), int(sys.argv[2]); answers = []\n"
        "for name, fd, flags in ((sys.argv[3], units, os.O_WRONLY | os.O_APPEND), ('perception-zz.service', units, os.O_WRONLY | os.O_CREAT),\n"
        "                        ('ok', status, os.O_WRONLY | os.O_CREAT)):\n"
        "    try:\n        os.close(os.open(name, flags, 0o660, dir_fd=fd))\n        answers.append('written')\n"
        "    except PermissionError:\n        answers.append('denied')\n"
        "print(' '.join(answers))"
    )
    python = Path("/usr/bin/python3")  # the system's: this interpreter may live in root's home, closed to others
    if not python.exists():
        pytest.skip("needs the system Python (apt-get install python3)")
    try:
        done = subprocess.run(
            [str(python), "-c", script, str(units_fd), str(status_fd), unit.name],
            preexec_fn=as_the_service, pass_fds=(units_fd, status_fd), capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    finally:
        os.close(units_fd)
        os.close(status_fd)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["denied", "denied", "written"]
    assert not (unit.parent / "perception-zz.service").exists()


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


@pytest.mark.parametrize(("version", "expected"), [(252, ["RestartSec=0.5"]), (254, ["RestartSec=0.5", "RestartSteps=6", "RestartMaxDelaySec=30"])])
def test_the_unit_restarts_with_the_supervisors_doubling_delay_where_systemd_can(example_pipeline, version, expected):
    """The supervisor waits restart_backoff_s, doubling up to 30 s; systemd 254+ says the same with RestartSteps= and
    RestartMaxDelaySec=, an earlier systemd only with its constant RestartSec=."""
    spec = example_pipeline.spec.model_copy(update={"service": example_pipeline.spec.service.model_copy(update={"restart_backoff_s": 0.5})})
    unit = render_unit(spec, root="/opt/perception", python="/usr/bin/python3", sdk_path="/opt/perception/agent/v1", systemd=version)
    assert [line for line in unit.splitlines() if line.startswith("Restart") and "Sec=" in line or "Steps=" in line] == expected
