"""Recovery that cannot be skipped, on a damaged disk: whatever state a crash, a full or read-only disk, a damaged
pointer or an edited file leaves, what starts is the committed release, verified; or one clear error line and
nothing runs. Each case on the local target, and as the systemd unit's start command (`serve --root`) where the unit
is concerned.

Over real OpenSSH (tests/tools/conftest.py), the cases where SSH brings lines of its own: a full or read-only store
(the device's agent copy runs from it), the selftest, the human rollback, an answer with notes (the fallback to the
previous release, and `sdk status` of it), the one `error:` line of a refused start (a damaged release, a deploy's
lease). Elsewhere a start over SSH runs the very command a local start runs (`python -m sdk service start` of the
agent's copy of `sdk`) and brings its answer back the way those cases do: the fault is handled on the device, the
same code either way, so those cases run locally only (decision 1231).

A template store (built once per run) holds A and B committed (B current) and C staged: a power cut during C's
trial is a trial record from an earlier boot with `current` naming C.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sdk.store.activation import STATE_FILE, TRIAL_FILE
from sdk.store.objects import ReleaseStore
from tests.conftest import PIPELINE, tiny_yolo
from tests.sdk.service.service_helpers import processes, reap, wait_for

REPO = Path(__file__).resolve().parents[3]
CAMERA = "synthetic://boxes?width=64&height=48&frames=100000"
SERVICE = """
service:
  watchdog_s: 2.0
  status_interval_s: 0.2
  stop_timeout_s: 2
  restart_backoff_s: 0.1
"""
# A camera unplugged for an hour right after the start: the health check hangs until its deadline.
HANGS = "synthetic://boxes?width=64&height=48&live=1&fps=30&unplug_at=1&unplug_ms=3600000"


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    from tests.conftest import shared_folder

    base = shared_folder(tmp_path_factory, "recovery-template", _build)
    return base / "template", json.loads((base / "ids.json").read_text())


def _build(base: Path) -> None:
    from tests.sdk.store.template import build_store

    health = "health: {min_frames: 5, timeout_s: 3}\n"
    releases = [("A", CAMERA, SERVICE, True), ("B", CAMERA, SERVICE, True), ("C", CAMERA, SERVICE, False), ("H", HANGS, SERVICE + health, False)]
    # 10 frames a second: a started service's runtime runs until the test stops it, and every case waits for states
    # (READY, a status, a switch) that come with the first frames; a faster camera only burns CPU meanwhile.
    build_store(base, releases, rate="10")


BOTH = ["local", "ssh"]


@pytest.fixture()
def target(request, tmp_path, monkeypatch):
    """(target name, its store root) of a fresh empty target: `local`, or `sim` over real OpenSSH; a test names which
    (parametrize "target" indirectly, BOTH for each)."""
    if request.param == "local":
        state = tmp_path / "state"
        monkeypatch.setenv("SDK_STATE_DIR", str(state))
        return "local", state / "targets" / "local"
    ssh = request.getfixturevalue("ssh_target")
    ssh.root.rmdir()
    return ssh.name, ssh.root


def copy_template(template, root: Path) -> tuple[ReleaseStore, dict]:
    source, ids = template
    root.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["cp", "-a", str(source), str(root)], check=True)  # -a keeps the store's hard links
    return ReleaseStore(root), ids


def power_cut_during_trial(store: ReleaseStore, release: str) -> None:
    """What a power cut during `release`'s trial leaves: its record (from an earlier boot) and `current` naming it."""
    with store.locked():
        store.begin_trial(release, token=None, owner="a host that lost power", deadline_s=3600)
    trial = json.loads((store.root / TRIAL_FILE).read_text())
    (store.root / TRIAL_FILE).write_text(json.dumps({**trial, "boot": "an-earlier-boot"}))
    assert store.current() == release


def serve_process_release(mark: str) -> set[str]:
    """The releases the running runtimes of this store run (from their command lines)."""
    found = set()
    for pid in processes(mark, "serve"):
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
        if "--release" in argv:
            found.add(Path(argv[argv.index("--release") + 1]).name)
    return found


def runtime_release(root: Path) -> str | None:
    try:
        return json.loads((root / "service" / "status.json").read_text()).get("release")
    except (OSError, ValueError):
        return None


def no_traceback(done) -> None:
    assert "Traceback" not in done.stderr and "Traceback" not in done.stdout, done.stderr


# -- HIGH: nothing unchecked runs after a power cut during a trial ---------------------------------------------------
@pytest.mark.parametrize("target", BOTH, indirect=True)
def test_selftest_after_a_power_cut_during_a_trial_checks_the_committed_release(template, target, sdk, monkeypatch):
    name, root = target
    store, ids = copy_template(template, root)
    power_cut_during_trial(store, ids["C"])
    from sdk import probe
    from sdk.errors import ReleaseError
    from tools.validation import selftest_bundle

    def no_bundle(facts, cache, repo=None):
        raise ReleaseError("no gpu tests packed by this test")

    monkeypatch.setattr(probe, "_compute_capability", lambda soc: None)  # no kernels
    # Not the gpu tests' bundle (packing it, sending it and a pytest run on the device cost ~10 CPU-seconds;
    # tests/tools/validation/ run it): what is checked here is which release the device's own selftest checks.
    monkeypatch.setattr(selftest_bundle, "build_bundle", no_bundle)
    done = sdk("selftest", "--target", name)
    no_traceback(done)
    assert f"selftest of release {ids['B']}" in done.stdout, done.stdout + done.stderr
    assert "no gpu tests packed by this test" in done.stdout  # the bundle's absence is said, and nothing else changed
    assert ids["C"] not in done.stdout
    assert store.trial() is None and store.current() == ids["B"]  # recovered first


# -- HIGH: a full or read-only disk after a power cut during a trial -------------------------------------------------
class Mounts:
    """Mounts of this test, undone in reverse order whatever happens (root only)."""

    def __init__(self) -> None:
        self.points: list[Path] = []

    def run(self, *args: str, point: Path) -> None:
        done = subprocess.run(["mount", *args, str(point)], capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"cannot mount here: {done.stderr.strip()}")
        self.points.append(point)

    def undo(self) -> None:
        for point in reversed(self.points):
            subprocess.run(["umount", "-l", str(point)], check=False)


@pytest.fixture()
def mounts():
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs or a read-only bind mount needs root")
    made = Mounts()
    yield made
    made.undo()


def damaged_store(kind: str, template, root: Path, mounts: Mounts, roomy: Path, before=lambda: None) -> tuple[ReleaseStore, dict]:
    """The template store at `root` after a power cut during C's trial, then made `full` (a tmpfs filled to its last
    byte) or `read-only` (a read-only bind mount). Its service folder stays writable on a mount of its own, as the
    locked-down unit's ReadWritePaths= leaves it (the status folder may live elsewhere than a damaged store).
    `before()` runs on the healthy store first (over SSH: the deploys before the power cut left the device agent)."""
    source, ids = template
    root.mkdir(parents=True, exist_ok=True)
    if kind == "full":
        mounts.run("-t", "tmpfs", "-o", "size=32m", "tmpfs", point=root)
    subprocess.run(["cp", "-a", f"{source}/.", str(root)], check=True)
    store = ReleaseStore(root)
    before()
    power_cut_during_trial(store, ids["C"])
    (root / "service").mkdir(exist_ok=True)
    if kind == "full":
        fill(root)
    else:
        mounts.run("--bind", str(root), point=root)
        mounts.run("-o", "remount,bind,ro", point=root)
    roomy.mkdir()
    mounts.run("--bind", str(roomy), point=root / "service")
    return store, ids


def fill(folder: Path) -> None:
    """Take every free byte of the file system at `folder`: writes fail with ENOSPC from now on."""
    with (folder / "filler").open("wb", buffering=0) as handle:
        for size in (1 << 20, 1 << 12, 1):
            try:
                while True:
                    handle.write(bytes(size))
            except OSError:
                pass


@pytest.mark.parametrize("kind", ["full", "read-only"])
@pytest.mark.parametrize("target", BOTH, indirect=True)
def test_a_full_or_read_only_store_after_a_power_cut_still_starts_the_committed_release(template, target, sdk, mounts, tmp_path, kind):
    name, root = target
    store, ids = damaged_store(kind, template, root, mounts, tmp_path / "service-rw", lambda: sdk("status", "--target", name, "--json"))
    try:
        done = sdk("start", "--json", "--target", name)
        no_traceback(done)
        assert done.returncode == 0, done.stderr
        answer = json.loads(done.stdout)
        assert answer["started"] and answer["release"] == ids["B"]
        assert any("recovery waits" in note for note in answer["notes"]), answer  # said; done when the disk allows
        assert serve_process_release(str(root)) == {ids["B"]}
        wait_for(lambda: runtime_release(root) == ids["B"], 30, "the committed release's status")
    finally:
        sdk("stop", "--json", "--target", name)
        reap(str(root))
    assert store.trial() is not None  # nothing could be written: the dead trial is still recorded, and it never ran


@pytest.mark.parametrize("kind", ["full", "read-only"])
def test_the_units_start_command_on_a_full_or_read_only_store_starts_the_committed_release(template, mounts, tmp_path, kind):
    root = tmp_path / "target"
    store, ids = damaged_store(kind, template, root, mounts, tmp_path / "service-rw")
    command = [sys.executable, "-B", "-m", "sdk", "serve", "--root", str(root), "--pipeline", "tiny", "--status-dir", str(root / "service")]
    env = {**os.environ, "PYTHONPATH": str(REPO)}  # as the unit's Environment=PYTHONPATH (the store code)
    try:
        done = subprocess.run([*command, "--frames", "5"], cwd=root, env=env, capture_output=True, text=True, timeout=120)
    finally:
        reap(str(root))
    no_traceback(done)
    assert done.returncode == 0, done.stderr
    assert "note: recovery waits" in done.stderr
    status = json.loads((root / "service" / "status.json").read_text())
    assert status["release"] == ids["B"] and status["frames"] == 5


def test_once_the_disk_has_room_again_the_next_start_repairs_the_store(template, mounts, tmp_path, sdk, monkeypatch):
    monkeypatch.setenv("SDK_STATE_DIR", str(tmp_path / "state"))
    root = tmp_path / "state" / "targets" / "local"
    store, ids = damaged_store("full", template, root, mounts, tmp_path / "service-rw")
    (root / "filler").unlink()
    try:
        done = sdk("start", "--json", "--target", "local")
        assert done.returncode == 0, done.stderr
        assert not any("recovery waits" in note for note in json.loads(done.stdout).get("notes", []))
    finally:
        sdk("stop", "--json", "--target", "local")
        reap(str(root))
    assert store.trial() is None and store.current() == ids["B"]
    assert "the device restarted during the trial" in store.status()["last_trial"]["reason"]


# -- HIGH: a damaged `current` pointer ---------------------------------------------------------------------------------
def current_made_a_directory(store: ReleaseStore) -> None:
    (store.root / "current").unlink()
    (store.root / "current").mkdir()
    (store.root / "current" / "left-here").write_text("whatever was copied in its place")


@pytest.mark.parametrize("target", BOTH, indirect=True)
def test_a_directory_in_place_of_current_is_set_aside_by_rollback(template, target, sdk):
    name, root = target
    store, ids = copy_template(template, root)
    current_made_a_directory(store)
    assert any("`current` is a directory" in d for d in store.status()["damaged"])
    done = sdk("rollback", "--target", name)  # as a person runs it: a few lines, not the store's JSON
    no_traceback(done)
    assert done.returncode == 0, done.stderr
    assert store.committed() == ids["A"] and store.current() == ids["A"] and store.status()["damaged"] == []
    lines = done.stdout.splitlines()
    assert lines[0] == f"{name}: went back one release: {ids['A']} is committed and current" and len(lines) <= 10, done.stdout


@pytest.mark.parametrize("target", ["local"], indirect=True)  # over SSH: see the module's docstring
def test_a_directory_in_place_of_current_does_not_stop_start(template, target, sdk):
    name, root = target
    store, ids = copy_template(template, root)
    current_made_a_directory(store)
    try:
        done = sdk("start", "--json", "--target", name)
        no_traceback(done)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["release"] == ids["B"]
        wait_for(lambda: runtime_release(root) == ids["B"], 30, "the committed release's status")
    finally:
        sdk("stop", "--json", "--target", name)
        reap(str(root))
    assert store.current() == ids["B"]


def test_a_directory_in_place_of_current_does_not_stop_a_deploy(template, tmp_path, state_dir, sdk):
    store, ids = copy_template(template, state_dir / "targets" / "local")
    current_made_a_directory(store)
    folder = tmp_path / "pipeline"
    folder.mkdir()
    tiny_yolo(folder / "tiny.onnx")
    (folder / "tiny.yaml").write_text(PIPELINE.format(uri="synthetic://boxes?width=64&height=48&frames=20", rate="null", max_ms=5000))
    done = sdk("deploy", "--target", "local", str(folder / "tiny.yaml"), "--report-dir", str(tmp_path / "report"))
    no_traceback(done)
    assert done.returncode in (0, 3, 4), done.stderr
    new = store.committed()
    assert new not in (ids["A"], ids["B"]) and store.current() == new and store.status()["damaged"] == []


@pytest.mark.parametrize("target", ["local"], indirect=True)  # over SSH: see the module's docstring
def test_a_damaged_state_file_is_reported_rebuilt_from_the_links_and_the_committed_release_starts(template, target, sdk):
    name, root = target
    store, ids = copy_template(template, root)
    (root / STATE_FILE).write_text('{"committed": "not a release", ')
    status = store.status()
    assert status["committed"] == ids["B"] and any("state.json is damaged" in d for d in status["damaged"])
    try:
        done = sdk("start", "--json", "--target", name)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["release"] == ids["B"]
    finally:
        sdk("stop", "--json", "--target", name)
        reap(str(root))
    assert json.loads((root / STATE_FILE).read_text()) == {"committed": ids["B"], "history": [ids["A"], ids["B"]]}
    assert store.status()["damaged"] == []


# -- A committed release edited on disk: only checked bytes start ------------------------------------------------------
def edit_committed(store: ReleaseStore, how: str) -> str:
    folder = store.release_dir(store.committed())
    if how == "changed":  # a file of this release's own (files shared with other releases are one object, damaged in all)
        path = folder / "pipeline" / "tiny.yaml"
        path.chmod(0o644)
        with path.open("a") as handle:
            handle.write("# edited on the device\n")
        return "pipeline/tiny.yaml does not match its manifest"
    if how == "same-length":  # one byte changed in place: only the file's hash can tell
        path = folder / "pipeline" / "tiny.yaml"
        data = path.read_bytes()
        path.chmod(0o644)
        with path.open("r+b") as handle:
            handle.write(data.replace(b"name:", b"NAME:", 1))
        assert len(path.read_bytes()) == len(data) and path.read_bytes() != data
        return f"release {store.committed()}: pipeline/tiny.yaml does not match its manifest (changed on disk)"
    if how == "planted-file":  # a module beside the release's own, in a folder its manifest lists
        (folder / "sdk" / "sitecustomize.py").write_text("import os\n")
        return f"release {store.committed()}: sdk/sitecustomize.py is not part of the release (its manifest does not list it)"
    # A pyc the manifest does not list, which Python would load in place of its source: the release carries the
    # runtime's own bytecode (decision 1240), but not the one a process run with -O (PYTHONOPTIMIZE) looks for.
    planted = folder / "sdk" / "__pycache__"
    planted.mkdir(exist_ok=True)
    (planted / f"__init__.{sys.implementation.cache_tag}.opt-1.pyc").write_bytes(b"not what was checked")
    return "is not part of the release"


@pytest.mark.parametrize(("target", "how"), [("local", "changed"), ("local", "planted"), ("ssh", "changed")], indirect=["target"])
def test_an_edited_committed_release_does_not_start_the_previous_one_does(template, target, sdk, how):
    name, root = target
    store, ids = copy_template(template, root)
    why = edit_committed(store, how)
    try:
        done = sdk("start", "--json", "--target", name)
        no_traceback(done)
        assert done.returncode == 0, done.stderr
        answer = json.loads(done.stdout)
        assert answer["release"] == ids["A"] and why in " ".join(answer["notes"])
        assert f"note: the committed release {ids['B']} failed its check" in done.stderr
        wait_for(lambda: runtime_release(root) == ids["A"], 30, "the previous release's status")
        assert serve_process_release(str(root)) == {ids["A"]}
        if how == "changed":  # sdk status names the release running and the fallback, not the committed one as if it ran
            first = sdk("status", "--target", name).stdout.splitlines()[0]
            assert first.startswith(f"{name}: release {ids['A']} is running, fallen back: the committed release {ids['B']} failed"), first
    finally:
        sdk("stop", "--json", "--target", name)
        reap(str(root))


@pytest.mark.parametrize(
    ("target", "how"), [("local", "changed"), ("local", "same-length"), ("local", "planted-file"), ("ssh", "changed")], indirect=["target"]
)
def test_with_if_damaged_refuse_an_edited_committed_release_starts_nothing(template, target, sdk, how):
    name, root = target
    store, ids = copy_template(template, root)
    state = json.loads((root / STATE_FILE).read_text())
    (root / STATE_FILE).write_text(json.dumps({**state, "if_damaged": "refuse"}))  # what a commit of `service.if_damaged: refuse` records
    why = edit_committed(store, how)
    try:
        done = sdk("start", "--json", "--target", name)
        no_traceback(done)
        assert done.returncode == 1
        lines = [line for line in done.stderr.splitlines() if line.startswith("error:")]
        assert len(lines) == 1 and "nothing verified can start" in lines[0] and why in lines[0]
        assert not processes(str(root), "supervise") and not processes(str(root), "serve")
    finally:  # were anything started after all, it does not outlive the test
        if processes(str(root), "supervise") or processes(str(root), "serve"):
            sdk("stop", "--json", "--target", name)
            reap(str(root))


def test_the_runtime_refuses_a_release_that_never_passed_its_health_check(template, tmp_path):
    store, ids = copy_template(template, tmp_path / "target")
    release = store.release_dir(ids["C"])  # staged, never tried
    command = [sys.executable, "-B", "-m", "sdk", "run", "--release", str(release), "--report-dir", str(tmp_path / "run"), "--frames", "2"]
    done = subprocess.run(command, cwd=release, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "neither committed nor on a live trial" in done.stderr
    assert not (tmp_path / "run" / "report.json").exists()


# -- The service follows the store -------------------------------------------------------------------------------------
@pytest.mark.parametrize("target", ["local"], indirect=True)  # over SSH: see the module's docstring
def test_after_rollback_the_running_service_runs_the_committed_release_within_10_s_and_after_a_crash(template, target, sdk):
    name, root = target
    store, ids = copy_template(template, root)
    try:
        assert sdk("start", "--json", "--target", name).returncode == 0
        wait_for(lambda: runtime_release(root) == ids["B"], 30, "B running")
        done = sdk("rollback", "--json", "--target", name)
        assert done.returncode == 0, done.stderr
        rolled = time.monotonic()
        wait_for(lambda: serve_process_release(str(root)) == {ids["A"]} and runtime_release(root) == ids["A"], 10, "A running after the rollback")
        assert time.monotonic() - rolled < 10
        (runtime,) = processes(str(root), "serve")
        os.kill(runtime, signal.SIGKILL)  # a crash: the supervisor restarts what may start, not what it ran first
        wait_for(lambda: processes(str(root), "serve") not in ([], [runtime]) and runtime_release(root) == ids["A"], 30, "the restart")
        assert serve_process_release(str(root)) == {ids["A"]}
        log = (root / "service" / "service.log").read_text()
        assert f"switching from {ids['B']} to {ids['A']}" in log
    finally:
        sdk("stop", "--json", "--target", name)
        reap(str(root))


def supervisor_of(root: Path) -> int:
    (pid,) = processes(str(root), "supervise")
    return pid


def test_sighup_reloads_sigusr1_and_sigusr2_are_ignored_and_every_end_is_recorded(template, state_dir, sdk):
    """SIGTERM here; SIGQUIT ends the second supervisor of the next test (each end is recorded by its signal's name)."""
    stop_with = signal.SIGTERM
    root = state_dir / "targets" / "local"
    store, ids = copy_template(template, root)
    try:
        assert sdk("start", "--json", "--target", "local").returncode == 0
        supervisor = supervisor_of(root)
        log = root / "service" / "service.log"
        for signum in (signal.SIGUSR1, signal.SIGUSR2, signal.SIGHUP):
            os.kill(supervisor, signum)
            time.sleep(0.2)  # one at a time: Python runs a handler per signal delivered, the same signal twice may merge
        wait_for(lambda: "SIGHUP: reload" in log.read_text(), 10, "the reload")
        text = log.read_text()
        assert "SIGUSR1 ignored" in text and "SIGUSR2 ignored" in text and f"{ids['B']} is still the release to run" in text
        assert supervisor_of(root) == supervisor and serve_process_release(str(root)) == {ids["B"]}
        os.kill(supervisor, stop_with)
        wait_for(lambda: not processes(str(root)), 20, "the service to stop")
    finally:
        reap(str(root))
    name = signal.Signals(stop_with).name
    state = json.loads((root / "service" / "supervisor.json").read_text())
    assert state["state"] == "stopped" and state["last_reason"] == f"stopped by {name}"
    assert f"supervisor ends: stopped (stopped by {name})" in (root / "service" / "service.log").read_text()


def test_a_supervisor_that_died_without_a_word_is_said_by_the_next_one_and_sigquit_ends_that_one(template, state_dir, sdk):
    root = state_dir / "targets" / "local"
    copy_template(template, root)
    try:
        assert sdk("start", "--json", "--target", "local").returncode == 0
        old = supervisor_of(root)
        os.kill(old, signal.SIGKILL)
        wait_for(lambda: not processes(str(root), "serve"), 20, "the runtime to end with its supervisor")
        assert sdk("start", "--json", "--target", "local").returncode == 0
        os.kill(supervisor_of(root), signal.SIGQUIT)  # the other end a unit or a person gives (SIGTERM: the test above)
        wait_for(lambda: not processes(str(root)), 20, "the service to stop")
    finally:
        if processes(str(root)):
            sdk("stop", "--json", "--target", "local")
        reap(str(root))
    log = (root / "service" / "service.log").read_text()
    assert f"the previous supervisor (pid {old}) ended without a word" in log
    state = json.loads((root / "service" / "supervisor.json").read_text())
    assert state["state"] == "stopped" and state["last_reason"] == "stopped by SIGQUIT"
    assert "supervisor ends: stopped (stopped by SIGQUIT)" in log


# -- Liveness: a stuck lock holder, a start during a deploy -------------------------------------------------------------
def hold_mutex(root: Path) -> subprocess.Popen:
    """A process that takes the store's mutex and never lets go (stuck), until the test kills it."""
    script = "import fcntl, sys, time; f = open(sys.argv[1], 'a'); fcntl.flock(f, fcntl.LOCK_EX); print('held', flush=True); time.sleep(3600)"
    holder = subprocess.Popen([sys.executable, "-c", script, str(root / ".lock")], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    return holder


def hold_deploy_lock(root: Path, owner: str) -> subprocess.Popen:
    lock = subprocess.Popen(
        [sys.executable, "-B", "-m", "sdk", "store", "--root", str(root), "hold-lock", owner, "--lease", "60"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    return lock


def test_a_stuck_mutex_holder_delays_neither_the_health_deadline_nor_start(template, state_dir, sdk):
    root = state_dir / "targets" / "local"
    store, ids = copy_template(template, root)
    lock = hold_deploy_lock(root, "a deploy")
    holder = None
    try:
        token = json.loads(lock.stdout.readline())["token"]
        argv = [sys.executable, "-B", "-m", "sdk", "store", "--root", str(root), "trial", ids["H"], "--token", str(token), "--owner", "a deploy"]
        started = time.monotonic()
        trial = subprocess.Popen([*argv, "--min-frames", "5", "--timeout", "3"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_for(lambda: processes(str(root), "run"), 30, "the health check to start")
        holder = hold_mutex(root)
        wait_for(lambda: not processes(str(root), "run"), 60, "the health check killed at its deadline")
        # The deadline (3 s), kept without the mutex, which stays held until the end of this test: the trial's and the
        # health run's start-ups and a poll come on top (about 3 s, up to 6 at load 8).
        assert time.monotonic() - started < 3 + 30
        out, _ = trial.communicate(timeout=60)
        answer = json.loads(out.strip().splitlines()[-1])
        assert not answer["healthy"] and f"pid {holder.pid}" in answer["reason"] and "did not finish within 3 s" in answer["reason"]
        lock.stdin.close()
        lock.wait(timeout=30)
        done = sdk("start", "--json", "--target", "local")  # the mutex is still held: the start goes on, the repair waits and is said
        assert done.returncode == 0, done.stderr
        answer = json.loads(done.stdout)
        assert answer["release"] == ids["B"] and any(f"pid {holder.pid}" in note for note in answer["notes"])
    finally:
        sdk("stop", "--json", "--target", "local")
        for process in (holder, lock):
            if process is not None:
                process.kill()
                process.wait()
        reap(str(root))
    assert store.committed() == ids["B"]


@pytest.mark.parametrize("target", BOTH, indirect=True)
def test_start_during_a_deploy_is_refused_naming_the_deploy(template, target, sdk):
    name, root = target
    copy_template(template, root)
    lock = hold_deploy_lock(root, "deployer-on-host-x")
    try:
        json.loads(lock.stdout.readline())
        done = sdk("start", "--json", "--target", name)
        no_traceback(done)
        assert done.returncode == 1 and "a deploy holds the target (deployer-on-host-x since" in done.stderr
        assert not processes(str(root), "supervise") and not processes(str(root), "serve")
    finally:
        lock.stdin.close()
        lock.wait(timeout=30)
        reap(str(root))
