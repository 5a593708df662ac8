"""Deploy over SSH against a real OpenSSH server: releases, reuse, rollback, trial activation, security, faults."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from sdk.errors import ConfigError, ReleaseError, SdkError, TargetError
from sdk.release import ReleaseManifest
from tests.conftest import PIPELINE, tiny_yolo
from tools.connect.remote_ops import probe, store_command
from tools.connect.ssh import SshConnection, fingerprint_of
from tools.deploy.flow import Deploy, DeployResult
from tools.targets import resolve_target

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "pipelines" / "pedestrian.yaml"


def pipeline_copy(tmp_path: Path, extra: str = "", replace: tuple[str, str] | None = None) -> Path:
    folder = tmp_path / "pipeline"
    if not folder.exists():
        shutil.copytree(REPO / "pipelines" / "assets", folder / "assets")
    text = EXAMPLE.read_text()
    if replace:
        text = text.replace(*replace)
    (folder / "p.yaml").write_text(text + extra)
    return folder / "p.yaml"


def tiny_copy(tmp_path: Path, extra: str = "", uri: str = "synthetic://boxes?width=64&height=48&frames=20", video: bool = False) -> Path:
    """A real pipeline (an ONNX model run by ONNX Runtime) whose every run on the device costs a fraction of the
    example's: for the tests whose subject is the store, the link or the fleet, not the detector (a 32 x 32 model on a
    64 x 48 synthetic camera; no accuracy budget, so the host computes no FP32 reference). Every deploy of it is still
    the whole deploy: lease, probe, upload, trial with a health run in the release's own fresh Python, commit, unit,
    measured run."""
    folder = tmp_path / "pipeline"
    if not (folder / "tiny.onnx").exists():
        folder.mkdir(parents=True, exist_ok=True)
        tiny_yolo(folder / "tiny.onnx")
    text = PIPELINE.format(uri=uri, rate="null", max_ms=5000)
    if video:  # an annotated recording of the run, fetched with its report
        text = text.replace("  - {kind: null}\n", "  - {kind: video, path: annotated.mp4}\n")
    (folder / "p.yaml").write_text(text + extra)
    return folder / "p.yaml"


@pytest.fixture()
def prepared(ssh_target, prepared_example):
    """The example's model, prepared once per session (tests/conftest.py), in this test's host cache: the tests that
    take it are about the target, not about preparing (tests/tools/models/test_prepare*.py are), and the key is the same."""
    shutil.copytree(prepared_example.folder, ssh_target.state / "cache" / "prepared" / prepared_example.folder.name)


class RecordingProgress:
    """Keeps every advance of every task, to see what an upload really sent."""

    def __init__(self) -> None:
        self.tasks: dict[str, list[float]] = {}

    def task(self, description: str, total: float | None = None):
        calls = self.tasks.setdefault(description, [])

        class Task:
            def advance(self, amount: float = 1) -> None:
                calls.append(amount)

            def update(self, *, completed=None, total=None) -> None:
                pass

            def done(self) -> None:
                pass

        return Task()


def current_of(root: Path) -> str:
    return (root / "current").resolve().name


def verify_current(root: Path) -> ReleaseManifest:
    current = (root / "current").resolve()
    manifest = ReleaseManifest.load(current)
    manifest.verify(current)
    return manifest


@dataclass(frozen=True)
class GoodStore:
    root: Path  # the device's store, with the release committed: copy it (copy_store), never change it
    release: str
    first: DeployResult  # the deploy that made it: a fresh device's first deploy over SSH
    pipeline: Path  # the pipeline file it deployed (read only too)


@pytest.fixture(scope="module")
def good_store(sim_server, tmp_path_factory) -> GoodStore:
    """A fresh device's store with a (tiny) release deployed over SSH and committed, once for the module: the first
    deploy (its report, its store) for the redeploy case to read, and the store that each case about the next release
    (its reuse, its upload, its trial, a fleet's, the lease) copies as its own target's remote root."""
    base = tmp_path_factory.mktemp("good-store")
    root, state = base / "remote", base / "state"
    root.mkdir()
    with pytest.MonkeyPatch.context() as patch:
        sim_server.write_target(base / "targets" / "sim.yaml", remote_root=str(root))
        patch.setenv("SDK_TARGETS_DIR", str(base / "targets"))
        patch.setenv("SDK_STATE_DIR", str(state))
        pipeline = tiny_copy(base, video=True)
        good = Deploy(pipeline, "sim", frames=2, report_dir=base / "r")()
    return GoodStore(root, good.staged.release_id, good, pipeline)


def copy_store(template: Path, root: Path) -> None:
    """`root` becomes a copy of the store `template` (`root`: an empty folder, as ssh_target makes it, or none)."""
    if root.exists():
        root.rmdir()
    subprocess.run(["cp", "-a", str(template), str(root)], check=True)  # -a keeps the store's hard links


@pytest.mark.slow
def test_deploy_redeploy_change_and_rollback_over_ssh(ssh_target, tmp_path, good_store):
    """The module's first deploy (a fresh device: agent installed, release staged, trial, commit, measured run), then,
    on a copy of its store, the same pipeline again (nothing sent, the same release), a changed one (only the changed
    file sent) and a rollback to the first. (The example's model deploys over SSH in the kill test, 14 times.)"""
    first = good_store.first
    report = first.report
    assert report["target"] == "sim" and report["frames"] == 2 and report["release"] == first.staged.release_id
    assert report["environment"]["sdk_location"] == str(good_store.root / "releases" / first.staged.release_id / "sdk")
    assert len((first.report_dir / "detections.jsonl").read_text().splitlines()) == 2
    assert (first.report_dir / "annotated.mp4").stat().st_size > 0
    assert current_of(good_store.root) == first.staged.release_id
    verify_current(good_store.root)
    assert not (good_store.root / "runs" / "validation").exists()  # fetched, then cleared on the device

    copy_store(good_store.root, ssh_target.root)
    again = Deploy(good_store.pipeline, "sim", frames=2, report_dir=tmp_path / "r2")()
    assert (again.staged.files_sent, again.staged.bytes_sent) == (0, 0)
    assert again.staged.release_id == first.staged.release_id == current_of(ssh_target.root)

    shutil.copytree(good_store.pipeline.parent, tmp_path / "pipeline")
    pipeline = tmp_path / "pipeline" / "p.yaml"
    pipeline.write_text(pipeline.read_text() + "# tuned\n")
    changed = Deploy(pipeline, "sim", frames=2, report_dir=tmp_path / "r3")()
    assert changed.staged.release_id != first.staged.release_id
    assert changed.staged.files_sent == 1 and changed.staged.bytes_sent == pipeline.stat().st_size
    assert current_of(ssh_target.root) == changed.staged.release_id

    status = store_command(resolve_target("sim"), "rollback")
    assert status["current"] == first.staged.release_id == current_of(ssh_target.root)
    assert status["service_unit"]["unit"] == str(ssh_target.root / "units" / "perception-tiny.service")  # follows the commit
    verify_current(ssh_target.root)


@pytest.mark.slow
def test_a_release_failing_its_health_check_is_rolled_back(ssh_target, tmp_path, good_store):
    good = good_store.release  # a release deployed and committed (a copy of the module's store)
    copy_store(good_store.root, ssh_target.root)
    # Valid on the host, broken on the device: the camera does not exist there.
    broken = tiny_copy(tmp_path, uri="v4l2:///dev/video-missing")
    with pytest.raises(ReleaseError, match=r"failed its health check on sim: cannot open V4L2 device .*rolled back to " + good):
        Deploy(broken, "sim", frames=2, report_dir=tmp_path / "r")()
    assert current_of(ssh_target.root) == good
    status = store_command(resolve_target("sim"), "status")
    assert status["trial"] is None and status["history"] == [good]


def test_probe_reports_the_fingerprint_with_honest_nulls(ssh_target):
    facts = probe(resolve_target("sim"))
    assert facts["target"] == "sim" and facts["arch"] == os.uname().machine
    assert facts["python"] == ".".join(map(str, sys.version_info[:3]))
    assert facts["free_disk_bytes"] > 0 and facts["l4t"] is None and facts["dla_cores"] is None
    assert set(facts) >= {"os", "tensorrt", "cuda", "cuda_toolkit", "compute_capability", "power_mode", "clocks", "jetpack"}


def test_a_service_command_on_a_fresh_device_installs_the_agent_copy_it_runs(ssh_target):
    """`sdk logs` / `stop` run one command of the agent's copy, with no agent process: on a device that has no copy yet
    (first contact), the command finds it missing, the copy is installed and the command runs."""
    from tools.connect.remote_ops import service_command

    assert service_command(resolve_target("sim"), "logs", "--lines", "5")["lines"] == []
    (version,) = [p.name for p in (ssh_target.root / "agent").iterdir()]
    assert (ssh_target.root / "agent" / version / "sdk" / "service" / "control.py").is_file()
    stopped = service_command(resolve_target("sim"), "stop")  # the copy is there now: used as it is
    assert stopped["stopped"] is False and stopped["note"] == "not running"
    assert [p.name for p in (ssh_target.root / "agent").iterdir()] == [version]


def publickey_attempts(server) -> int:
    return sum(1 for line in server.log.read_text().splitlines() if "publickey" in line)


def other_host_key(tmp_path: Path) -> str:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "other")], check=True)
    return " ".join((tmp_path / "other.pub").read_text().split()[:2])


def test_changed_host_key_is_refused_before_any_credential(ssh_target, tmp_path):
    known = tmp_path / "known_hosts_changed"
    known.write_text(f"[127.0.0.1]:{ssh_target.server.port} {other_host_key(tmp_path)}\n")
    ssh_target.write(host_key={"known_hosts": str(known)})
    before = publickey_attempts(ssh_target.server)
    with pytest.raises(TargetError) as info:
        probe(resolve_target("sim"))
    message = info.value.message
    expected = fingerprint_of_file(tmp_path / "other.pub")
    received = fingerprint_of_file(ssh_target.server.host_key.with_suffix(".pub"))
    assert "HOST KEY MISMATCH" in message and f"expected {expected}" in message and f"received {received}" in message
    time.sleep(0.2)
    assert publickey_attempts(ssh_target.server) == before
    assert not list(ssh_target.root.iterdir())


def fingerprint_of_file(public: Path) -> str:
    import paramiko

    kind, data = public.read_text().split()[:2]
    return fingerprint_of(paramiko.PKey.from_type_string(kind, __import__("base64").b64decode(data)))


def test_unknown_host_is_refused_and_never_added(ssh_target, tmp_path):
    known = tmp_path / "empty_known_hosts"
    known.write_text("")
    ssh_target.write(host_key={"known_hosts": str(known)})
    with pytest.raises(TargetError, match=r"unknown host: no key for it .* received SHA256:"):
        probe(resolve_target("sim"))
    assert known.read_text() == ""  # never auto-added


def test_pinned_fingerprint(ssh_target):
    right = fingerprint_of_file(ssh_target.server.host_key.with_suffix(".pub"))
    ssh_target.write(host_key={"fingerprint": right})
    assert probe(resolve_target("sim"))["arch"]
    wrong = "SHA256:" + "A" * 43
    ssh_target.write(host_key={"fingerprint": wrong})
    with pytest.raises(TargetError, match=re.escape(f"expected {wrong}, received {right}")):
        probe(resolve_target("sim"))


def test_password_only_server_is_refused_without_offering_the_key(tmp_path, sim_server, monkeypatch):
    from tools.targets.sim import SimServer

    with SimServer(tmp_path / "pw", password_only=True) as server:
        server.write_target(tmp_path / "targets" / "pw.yaml", key_file=str(sim_server.client_key))
        monkeypatch.setenv("SDK_TARGETS_DIR", str(tmp_path / "targets"))
        with pytest.raises(TargetError, match="offers only password; this tool authenticates with keys only"):
            probe(resolve_target("pw"))
        time.sleep(0.2)
        assert publickey_attempts(server) == 0


def test_a_wrong_key_is_refused_clearly(ssh_target, tmp_path):
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "stranger")], check=True)
    ssh_target.write(key_file=str(tmp_path / "stranger"))
    with pytest.raises(TargetError, match="refused the key"):
        probe(resolve_target("sim"))


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("remote_root", "/tmp/x; rm -rf /"),
        ("remote_root", "/srv/$(reboot)"),
        ("remote_root", "/srv/../etc"),
        ("user", "root; reboot"),
        ("host", "--help"),
        ("python", "python3 -c 'import os'"),
    ],
)
def test_hostile_values_in_a_target_file_are_refused(ssh_target, field, value):
    ssh_target.write(**{field: value})
    with pytest.raises(ConfigError, match=field):
        resolve_target("sim")


@pytest.mark.parametrize("name", ["orin-01; rm -rf /", "$(reboot)", "--help", "../x"])
def test_hostile_target_names_are_refused(ssh_target, name):
    with pytest.raises(TargetError, match="invalid target name"):
        resolve_target(name)


def test_remote_arguments_stay_literal(ssh_target):
    hostile = '$(touch /tmp/sdk-pwned); rm -rf "$HOME" `id` --help ../x'
    with SshConnection(resolve_target("sim")) as connection:
        result = connection.run(["printf", "%s", hostile]).check("printf")
    assert result.stdout == hostile
    assert not Path("/tmp/sdk-pwned").exists()


def test_a_frozen_server_times_out_within_the_deadline(ssh_target):
    ssh_target.write(timeouts={"connect_s": 1.5, "command_s": 5, "deadline_s": 120, "keepalive_s": 1})
    pid = ssh_target.server.pid
    before = {t for t in threading.enumerate() if t.name.startswith("paramiko")}  # another test's may still be ending
    os.kill(pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        with pytest.raises(TargetError, match="handshake failed|timed out|did not finish"):
            probe(resolve_target("sim"))
        # The handshake's own timeout (connect_s, 1.5 s) ends it: about 2 s measured, 2.5 s at load 8; the 120 s
        # deadline would end it 100 s later.
        assert time.monotonic() - started < 15
    finally:
        os.kill(pid, signal.SIGCONT)
    assert not [t for t in threading.enumerate() if t.name.startswith("paramiko") and t.is_alive() and t not in before]


def test_a_full_disk_is_refused_up_front_and_nothing_changes(ssh_target, tmp_path, prepared):
    # The example's release (12 MB of model), its model prepared once per session: the subject is the disk check.
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    small = tmp_path / "small"
    small.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(small)], capture_output=True).returncode != 0:
        pytest.skip("cannot mount tmpfs here")
    try:
        ssh_target.write(remote_root=str(small))
        with pytest.raises(ReleaseError, match=r"^disk full on sim: need [1-9]\d\.\d MB, have [0-4]\.\d MB$"):
            Deploy(pipeline_copy(tmp_path), "sim", frames=2, report_dir=tmp_path / "r")()
        assert not (small / "current").exists() and not list((small / "store").iterdir())
    finally:
        subprocess.run(["umount", str(small)], check=False)


SIZE = 80_000_000  # large enough that the upload outlasts the watcher's reaction at every cut offset
CUTS = (1_000_000, 25_000_000, 50_000_000)  # where the link is cut: early, a third of the way, past half


def sshd_children(server) -> list[int]:
    done = subprocess.run(["pgrep", "-P", str(server.pid)], capture_output=True, text=True)
    return [int(pid) for pid in done.stdout.split()]


def cut_when_beyond(server, watched: Path, cut_at: int) -> tuple[threading.Thread, threading.Event]:
    """A watcher that kills the SSH connection's processes (a cut link) once `watched` holds more than `cut_at` bytes."""
    fired = threading.Event()

    def cut_when_uploading() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                size = watched.stat().st_size
            except FileNotFoundError:
                size = 0
            if size > cut_at:
                for pid in sshd_children(server):
                    os.kill(pid, signal.SIGKILL)
                fired.set()
                return
            time.sleep(0.002)

    cutter = threading.Thread(target=cut_when_uploading)
    cutter.start()
    return cutter, fired


def sending_of(progress: RecordingProgress) -> list[float]:
    return next(calls for name, calls in progress.tasks.items() if name.startswith("sending"))


@pytest.mark.slow
def test_a_cut_connection_mid_upload_leaves_the_old_release_and_the_retry_resumes(ssh_target, tmp_path, good_store):
    """One upload of a big release, its link cut three times (CUTS): at 1 MB of the fresh upload, then at 25 and 50 MB
    of the deploys that resume it, each resumed upload cut in turn. After every cut the old release is current and
    complete, and the partial upload stays on the device; every retry resumes where the last cut left it and sends
    only the missing bytes; the last one completes the object, verified, then fails its health check (random bytes
    are no video) and the old release stays. One release and one big file serve the three cuts: a cut at each offset
    is still made, and a resumed upload that is cut again is one case more."""
    good_release = good_store.release
    copy_store(good_store.root, ssh_target.root)
    changed = tiny_copy(tmp_path, uri="file://big.avi")  # the good release's model, a big recording beside it
    big = tmp_path / "pipeline" / "big.avi"
    big.write_bytes(os.urandom(SIZE))
    digest = hashlib.sha256(big.read_bytes()).hexdigest()
    partial = ssh_target.root / "store" / f".upload-{digest}"
    already = 0
    for cut_at in CUTS:
        assert already < cut_at, f"the last cut left {already} bytes, beyond this cut's {cut_at}"
        cutter, fired = cut_when_beyond(ssh_target.server, partial, cut_at)
        progress = RecordingProgress()
        with pytest.raises(SdkError):
            Deploy(changed, "sim", frames=2, report_dir=tmp_path / "r", progress=progress)()
        cutter.join()
        assert fired.is_set(), f"the upload finished before the connection could be cut at {cut_at} bytes"
        assert current_of(ssh_target.root) == good_release, cut_at
        verify_current(ssh_target.root)
        if already:  # resumed: the bytes already on the device are counted once, not sent again
            assert already in sending_of(progress), (cut_at, already)
        now = partial.stat().st_size
        assert cut_at < now < SIZE, (cut_at, now)  # kept on the device for the retry
        already = now
    # The retry fails its health check (random bytes are no video) but first it must resume the upload.
    progress = RecordingProgress()
    with pytest.raises(ReleaseError, match="health check"):
        Deploy(changed, "sim", frames=2, report_dir=tmp_path / "r", progress=progress)()
    sending = sending_of(progress)
    assert already in sending  # resumed: the bytes already on the device are counted once, not sent again
    # The pipeline file went first and was published (verified) before the first cut: it is not sent again.
    assert sum(sending) == SIZE
    store = ssh_target.root / "store"
    assert not list(store.glob(".upload-*"))
    assert (store / digest).stat().st_size == SIZE  # complete and verified on the device
    assert current_of(ssh_target.root) == good_release


# A process that has imported the CLI and what a deploy loads (paramiko, ONNX Runtime, OpenCV, matplotlib) once, and
# forks a fresh deploy process per request: each one is a real OS process running `sdk deploy`, killed with SIGKILL
# like any other, but without 2-3 CPU-seconds of imports before it first touches the target (a kill during the
# imports proves nothing, since nothing has been sent yet). Requests and answers are JSON lines on stdin/stdout.
ZYGOTE = r"""
import importlib, json, os, sys
from tools.cli import run
for name in ("tools.deploy.flow", "tools.reports.plots", "tools.console", "tools.connect.ssh_agent", "paramiko", "cv2", "onnxruntime", "onnx",
             "sdk.gpu.session", "sdk.postprocess.yolo", "sdk.sources.synthetic", "sdk.sinks.jsonl"):
    importlib.import_module(name)
answers = sys.stdout
for line in sys.stdin:
    request = json.loads(line)
    if "wait" in request:
        status = os.waitpid(request["wait"], 0)[1]
        code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        answers.write(json.dumps({"code": code}) + "\n")
        answers.flush()
        continue
    answers.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the deploy process: output to a file or nowhere, then `sdk deploy ...` and its exit code
        os.dup2(os.open(os.devnull, os.O_RDWR), 0)
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
        os.dup2(os.open(request.get("stderr") or os.devnull, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 2)
        code = run(request["argv"])
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)  # not the interpreter's shutdown: a native library's exit hook would join threads only the zygote had
    answers.write(json.dumps({"pid": pid}) + "\n")
    answers.flush()
"""


class DeployForks:
    """Starts deploy processes forked from ZYGOTE; `close()` ends it (each started process must be waited for first)."""

    def __init__(self, env: dict) -> None:
        self.zygote = subprocess.Popen([sys.executable, "-c", ZYGOTE], cwd=REPO, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.running: set[int] = set()

    def _ask(self, request: dict) -> dict:
        self.zygote.stdin.write(json.dumps(request) + "\n")
        self.zygote.stdin.flush()
        return json.loads(self.zygote.stdout.readline())

    def start(self, argv: list[str], stderr: Path | None = None) -> int:
        pid = self._ask({"argv": argv, "stderr": str(stderr) if stderr else None})["pid"]
        self.running.add(pid)
        return pid

    def wait(self, pid: int) -> int:
        code = self._ask({"wait": pid})["code"]
        self.running.discard(pid)
        return code

    def run(self, argv: list[str], stderr: Path) -> tuple[int, str]:
        code = self.wait(self.start(argv, stderr))
        return code, stderr.read_text()

    def close(self) -> None:
        for pid in list(self.running):  # a test that failed midway leaves no deploy running
            os.kill(pid, signal.SIGKILL)
            self.wait(pid)
        self.zygote.stdin.close()
        self.zygote.wait(timeout=60)
        self.zygote.stdout.close()


# Where each SIGKILL of the host's deploy is aimed. The device announces the points it passes (sdk/store/faults.py,
# SDK_FAULT_TRACE set by its Python); an aimed kill waits until the device has passed one of the points (chosen at
# random, seeded) and then a random moment more. "anywhere": a random moment of a whole deploy's time (the first
# deploy's, measured in the same run), wherever it lands.
AIMS = {
    "anywhere": ((), 0.0, None),
    "staging": (("lease.token-written", "lease.recorded", "store.object-installed"), 0.0, 0.02),
    "trial": (("trial.record-written", "trial.current-switched", "trial.health-started", "trial.health-running"), 0.0, 0.1),
    "after the commit": (("commit.state-written", "commit.trial-removed"), 0.0, 0.5),
}
SWITCHED, COMMITTED = "trial.current-switched", "commit.state-written"
LANDS = {
    "anywhere": {"before the switch", "trial", "after the commit"},
    "staging": {"before the switch", "trial"},
    "trial": {"trial"},
    "after the commit": {"after the commit"},
}


def landed_in(passed: list[str]) -> str:
    """Where a kill landed, from the points the device had passed when the host died."""
    if COMMITTED in passed:
        return "after the commit"
    return "trial" if SWITCHED in passed else "before the switch"


def device_processes(root: Path) -> list[int]:
    """The device's processes of a store (the agent, a trial, a health run): every one names the remote root."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if str(root) in (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def process_line(pid: int) -> str:
    """A process's state and command line, for a message."""
    try:
        state, parent = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[:2]
        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        waiting = Path(f"/proc/{pid}/wchan").read_text()
        parent_command = Path(f"/proc/{parent}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        return f"{state} in {waiting}: {command} (parent {parent}: {parent_command[:120]})"
    except OSError:
        return "(ended)"


@pytest.mark.slow
def test_kill_9_of_the_deploy_at_random_points_never_breaks_current(ssh_target, tmp_path, prepared):
    """SIGKILL the host's deploy 12 times, aimed in turn at staging, the trial, after the commit and anywhere: after
    each kill, once the device has finished reacting (its session's end rolls back an unfinished trial), the committed
    release is the new one exactly when the device had written the commit, and `current` is a complete release."""
    import random

    from sdk.store.objects import ReleaseStore

    trace = tmp_path / "device-trace"
    device_python = tmp_path / "device-python"  # the device's Python, announcing the points it passes
    device_python.write_text(f'#!/bin/sh\nSDK_FAULT_TRACE="{trace}" exec {sys.executable} "$@"\n')
    device_python.chmod(0o755)
    ssh_target.write(python=str(device_python))
    pipeline = pipeline_copy(tmp_path)
    argv = ["deploy", "--target", "sim", str(pipeline), "--frames", "2", "--report-dir", str(tmp_path / "r")]
    argv.append("--force")  # the same report folder each time: each run empties it first
    store = ReleaseStore(ssh_target.root)

    def passed_since(offset: int) -> list[str]:
        return [line.split(" ", 1)[1] for line in trace.read_text().splitlines()[offset:]] if trace.exists() else []

    forks = DeployForks({**os.environ, "COLUMNS": "200"})
    rng = random.Random(7)
    landed: dict[str, list[str]] = {}
    try:
        started = time.monotonic()
        code, stderr = forks.run(argv, tmp_path / "first.err")
        assert code in (0, 4), stderr
        span = time.monotonic() - started  # a whole deploy, with its upload of the model
        for attempt in range(12):  # each aim three times (tests/sdk/store/test_kill_points.py kills at every point)
            aim = list(AIMS)[attempt % len(AIMS)]
            points, low, high = AIMS[aim]
            pipeline_copy(tmp_path, extra=f"# attempt {attempt}\n")  # a new release each time
            before = store.committed()
            offset = len(trace.read_text().splitlines())
            child = forks.start(argv)
            started = time.monotonic()
            if points:
                wanted = rng.choice(points)
                while wanted not in passed_since(offset):
                    assert time.monotonic() - started < 300, f"attempt {attempt}: the deploy never reached {wanted}: {passed_since(offset)}"
                    time.sleep(0.005)
            time.sleep(rng.uniform(low, span if high is None else high))
            os.kill(child, signal.SIGKILL)
            at_kill = passed_since(offset)
            forks.wait(child)
            settled = time.monotonic() + 120
            while device_processes(ssh_target.root) and time.monotonic() < settled:
                time.sleep(0.05)  # the device sees its session end and rolls back what the host left unfinished
            left = {pid: process_line(pid) for pid in device_processes(ssh_target.root)}
            assert not left, f"attempt {attempt} ({aim}, killed after {at_kill[-3:]}): the device's processes outlived the deploy's session: {left}"
            passed = passed_since(offset)
            where = landed_in(at_kill)
            landed.setdefault(where, []).append(at_kill[-1] if at_kill else "(nothing yet)")
            # A kill lands at or after its aim, never before; a trial's health run takes seconds and its commit needs the
            # host, so a kill aimed at the trial lands in it. (Staging to the switch can take only milliseconds.) Aimed
            # just after the trial's record, it may land before the switch that follows it: a link and an fsync, which a
            # busy disk can make longer than the random delay.
            allowed = LANDS[aim] | ({"before the switch"} if points and wanted == "trial.record-written" else set())
            assert (not points or wanted in at_kill) and where in allowed, (attempt, aim, at_kill)
            committed = store.committed()
            if COMMITTED in passed:  # the device wrote the commit: the new release is the committed one
                texts = [path.read_text() for path in store.release_dir(committed).rglob("p.yaml")]
                assert committed != before and any(text.endswith(f"# attempt {attempt}\n") for text in texts), (attempt, passed)
            else:  # killed before the commit: the last committed release stays, the trial (if any) rolled back
                assert committed == before, (attempt, passed)
            verify_current(ssh_target.root)  # always exactly one complete release
        counts = {where: len(points) for where, points in landed.items()}
        print(f"kills landed: {counts} ({landed})")
        assert {"before the switch", "trial", "after the commit"} <= set(counts), counts
        code, stderr = forks.run(argv, tmp_path / "final.err")
        assert code in (0, 4), stderr
    finally:
        forks.close()
    status = store_command(resolve_target("sim"), "status")
    assert status["trial"] is None and status["current"] == current_of(ssh_target.root)
    assert json.loads((tmp_path / "r" / "report.json").read_text())["release"] == status["current"]


@pytest.mark.slow
def test_a_fleet_with_one_target_down_names_the_failure(ssh_target, tmp_path, good_store):
    """Two vehicles deployed side by side (each its own sshd, host key and store) and a third that is down: the two
    are deployed, the third is named with its error, in the group's order; a canary that is down stops the rest.
    Each vehicle's store is a copy of the module's (its agent installed, a release committed): each gets a new release,
    with its own upload, trial and commit."""
    from tools.deploy.fleet import FleetResult
    from tools.targets.sim import SimServer

    servers = [SimServer(tmp_path / f"host{k}").start() for k in range(2)]
    try:
        for k, server in enumerate(servers):
            root = tmp_path / f"root{k}"
            copy_store(good_store.root, root)
            server.write_target(ssh_target.targets / f"orin-0{k + 1}.yaml", remote_root=str(root))
        down = SimServer(tmp_path / "down")  # never started: its port refuses connections
        down.write_target(
            ssh_target.targets / "orin-03.yaml",
            remote_root=str(tmp_path / "root2"),
            key_file=str(servers[0].client_key),
            host_key={"known_hosts": str(servers[0].known_hosts)},
        )
        (ssh_target.targets / "groups.yaml").write_text("vehicles: [orin-01, orin-02, orin-03]\n")
        result = Deploy(tiny_copy(tmp_path, extra="# fleet\n"), "vehicles", frames=2, report_dir=tmp_path / "fleet")()
        assert isinstance(result, FleetResult)
        by_name = {o.target: o for o in result.outcomes}
        assert [o.target for o in result.outcomes] == ["orin-01", "orin-02", "orin-03"]
        assert all(by_name[f"orin-0{k}"].error is None and by_name[f"orin-0{k}"].verdict for k in (1, 2)), [o.error for o in result.outcomes]
        assert "cannot connect" in by_name["orin-03"].error
        assert result.exit_code == 1
        summary = json.loads((tmp_path / "fleet" / "fleet.json").read_text())
        assert list(summary["errors"]) == ["orin-03"] and summary["exit_code"] == 1
        for k in (1, 2):
            assert json.loads((tmp_path / "fleet" / f"orin-0{k}" / "report.json").read_text())["target"] == f"orin-0{k}"
            assert current_of(tmp_path / f"root{k - 1}") == by_name[f"orin-0{k}"].release != good_store.release
            verify_current(tmp_path / f"root{k - 1}")
        canary = Deploy(tiny_copy(tmp_path), "orin-03,orin-01", frames=2, report_dir=tmp_path / "canary", canary=True)()
        assert "cannot connect" in canary.outcomes[0].error
        assert canary.outcomes[1].error == "not attempted: the canary orin-03 did not pass"
    finally:
        for server in servers:
            server.stop()


def test_a_target_behind_a_jump_host(ssh_target, tmp_path):
    from tools.targets.sim import SimServer

    def accepted() -> int:
        return ssh_target.server.log.read_text().count("Accepted publickey")

    before = accepted()
    with SimServer(tmp_path / "inner") as inner:
        ssh_target.write("gateway")
        inner.write_target(ssh_target.targets / "inner.yaml", remote_root=str(tmp_path), jump="gateway")
        facts = probe(resolve_target("inner"))
    assert facts["target"] == "inner" and facts["arch"]
    assert "Accepted publickey" in (tmp_path / "inner" / "sshd.log").read_text()
    assert accepted() == before + 1  # one session on the gateway carried the connection to the inner host


@pytest.mark.slow
def test_a_device_python_without_the_runtime_gets_an_offline_environment(ssh_target, tmp_path):
    """Debian's own python3 lacks numpy, OpenCV, pydantic and ONNX Runtime, like a fresh JetPack:
    the deploy ships wheels for its platform and the device installs them with no network."""
    device_python = "/usr/bin/python3"
    if not Path(device_python).exists() or subprocess.run([device_python, "-c", "import numpy"], capture_output=True).returncode == 0:
        pytest.skip("needs a system python3 without numpy (apt-get install python3)")
    ssh_target.write(python=device_python)
    result = Deploy(tiny_copy(tmp_path), "sim", frames=3, report_dir=tmp_path / "r")()  # every release needs the runtime
    manifest = verify_current(ssh_target.root)
    wheels = sorted(name for name in manifest.files if name.startswith("wheels/"))
    assert any("onnxruntime" in w for w in wheels) and any("numpy" in w for w in wheels) and any("opencv" in w for w in wheels)
    env = ssh_target.root / "envs" / manifest.release_id
    assert result.staged.python == str(env / "bin" / "python")
    packages = result.report["environment"]["packages"]
    assert (
        result.report["environment"]["python"]
        == subprocess.run([device_python, "-c", "import platform; print(platform.python_version())"], capture_output=True, text=True).stdout.strip()
    )
    for name in ("numpy", "cv2", "onnxruntime", "pydantic"):
        assert packages[name]["location"].startswith(str(env)), packages[name]
    device = json.loads((tmp_path / "r" / "device.json").read_text())
    assert set(device["missing_modules"]) >= {"numpy", "onnxruntime"}


@pytest.mark.slow
def test_deploys_are_serialised_and_a_silent_host_loses_the_lock(ssh_target, good_store):
    from tools.connect.sessions import open_session
    from tools.release.bundle import runtime_files

    copy_store(good_store.root, ssh_target.root)  # a device with its agent (the lease is the agent's) and a release
    ssh_target.write(timeouts={"connect_s": 5, "command_s": 30, "deadline_s": 120, "keepalive_s": 1})  # lease: 5 s
    target = resolve_target("sim")
    with open_session(target) as first, open_session(target) as second:
        first.ensure_agent(runtime_files())
        second.ensure_agent(runtime_files())
        first.lock("host-a:1")
        started = time.monotonic()
        with pytest.raises(ReleaseError, match="the target is busy: host-a:1 since"):
            second.lock("host-b:2")
        # It waited one lease (5 s, plus 2) for the holder to go away, then named it: about 7 s, 9 at load 8; never the
        # connection's deadline (120 s).
        assert 5 <= time.monotonic() - started < 60
        first._lock._beating.set()  # host A goes silent (a pulled cable): its channel stays open, its heartbeats stop
        second.lock("host-b:2")  # within one lease, the device released A's lock
        second.unlock("host-b:2")
        first.unlock("host-a:1")
