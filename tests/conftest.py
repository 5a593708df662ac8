"""Shared fixtures: the real assets, the example pipeline, a prepared model cached once per session, and a tiny real pipeline;
and the session's hygiene: nothing written into the checkout, no process left behind."""

from __future__ import annotations

import fcntl
import getpass
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
# The real assets the tests use, shipped in the repository with their provenance (PROVENANCE.md beside each): a clone has all it needs.
ASSETS = REPO / "pipelines" / "assets"
TEST_ASSETS = REPO / "tests" / "integration" / "assets"
EXAMPLE = REPO / "pipelines" / "pedestrian.yaml"


# Python processes the tests start never write bytecode, as on a device (its unit and every release command set this):
# a release or environment folder the tests run code from stays what its manifest lists, also for a suite run as root
# (whom a read-only folder does not stop). The checkout's own bytecode, compiled ahead (.ci/run), is still read.
os.environ["PYTHONDONTWRITEBYTECODE"] = "1"
# The labgrid tests talk to their coordinator over gRPC in the worker's own process, and gRPC's threads stay after
# them. With gRPC's fork support on (its default), every later fork in that worker runs gRPC's fork handlers, which
# skip themselves while those threads are busy ("Other threads are currently calling into gRPC, skipping fork()
# handlers") and can leave a gRPC thread in the child before its exec. Two children forked in such workers failed so:
# one printed gRPC's "epoll_wait error: Bad file descriptor" and stopped, one died before its first line. The tests'
# children exec at once and never use gRPC across a fork, so its fork support is off for the suite.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

# Where the SDK writes by default, relative to the checkout: no test may leave anything there.
CHECKOUT_OUTPUTS = (".sdk", "reports", "targets", ".benchmarks")


def _checkout_files() -> set[Path]:
    return {p for folder in CHECKOUT_OUTPUTS if (REPO / folder).exists() for p in (REPO / folder).rglob("*") if "__pycache__" not in p.parts}


def _processes() -> dict[int, tuple[int, str, str]]:
    """pid -> (parent pid, state, command line), from /proc."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                fields = handle.read().rpartition(")")[2].split()
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                command = handle.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue  # ended meanwhile
        found[int(entry)] = (int(fields[1]), fields[0], command)
    return found


def leftover_processes(basetemp: Path) -> dict[int, str]:
    """Live processes this session started: descendants of pytest, and any process whose command line names the
    session's temporary folder (daemons such as sshd, or a detached service supervisor, are re-parented away)."""
    table = _processes()
    me = os.getpid()
    ancestors, pid = set(), me
    while pid in table and pid not in ancestors:
        ancestors.add(pid)
        pid = table[pid][0]
    children: dict[int, list[int]] = {}
    for pid, (parent, _, _) in table.items():
        children.setdefault(parent, []).append(pid)
    descendants, queue = set(), [me]
    while queue:
        for child in children.get(queue.pop(), []):
            if child not in descendants:
                descendants.add(child)
                queue.append(child)
    marker = str(basetemp.resolve())
    named = {pid for pid, (_, _, command) in table.items() if f"{marker}/" in command or command.endswith(marker)}
    left = {}
    for pid in (descendants | named) - ancestors:
        parent, state, command = table[pid]
        if state == "Z":
            if parent == me:
                try:
                    os.waitpid(pid, os.WNOHANG)  # reap our own finished child
                except ChildProcessError:
                    pass
            continue
        left[pid] = command
    return left


@pytest.fixture(scope="session", autouse=True)
def hermetic_session(tmp_path_factory):
    """Targets and host state default to this session's temporary folders (a test or a CLI it runs never reads
    the checkout's targets/ or writes its .sdk/); at the end, files the session left in the checkout and
    processes it left running fail the session, and those processes are ended."""
    patch = pytest.MonkeyPatch()
    folder = tmp_path_factory.mktemp("session")
    if not os.environ.get("SDK_HERMETIC_SESSION"):  # a pytest run by a test (the plugin's tests) keeps its parent's targets
        patch.setenv("SDK_TARGETS_DIR", str(folder / "targets"))
        patch.setenv("SDK_STATE_DIR", str(folder / "state"))
        patch.setenv("SDK_HISTORY", str(folder / "history.sqlite"))  # every run a test makes is recorded here, not in reports/
        patch.setenv("SDK_HERMETIC_SESSION", "1")
    before = _checkout_files()
    yield
    patch.undo()
    problems = []
    written = sorted(_checkout_files() - before)
    if written:
        problems.append("tests wrote into the checkout: " + ", ".join(str(p.relative_to(REPO)) for p in written[:20]))
    if os.path.isdir("/proc/self"):
        basetemp = tmp_path_factory.getbasetemp()
        deadline = time.monotonic() + 5  # a server stopped at teardown may take a moment to exit
        while (left := leftover_processes(basetemp)) and time.monotonic() < deadline:
            time.sleep(0.1)
        if left:
            problems.append("processes left running (now killed): " + "; ".join(f"{pid}: {command[:160]}" for pid, command in sorted(left.items())))
            for sig in (signal.SIGTERM, signal.SIGKILL):
                for pid in left:
                    try:
                        os.kill(pid, sig)
                    except ProcessLookupError:
                        pass
                time.sleep(0.5)
    if problems:
        pytest.fail("; ".join(problems), pytrace=False)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _dead_session(folder: Path) -> bool:
    """Whether the pytest run that owns basetemp `folder` (pytest-N, its .lock names the run's pid) has ended."""
    try:
        return not _alive(int((folder / ".lock").read_text().strip()))
    except (OSError, ValueError):
        return True  # the lock is removed when a run ends normally, and the folder when pytest prunes it


def sweep_stale_resources() -> list[str]:
    """What an earlier run that was killed (SIGKILL, a CI timeout) left behind and that would disturb this one:
    processes started from its temporary folder (sshd, supervisors, labgrid), its mounts there (the full and
    read-only store tests) and its network namespaces (tests/tools/netns.py: sdk<pid % 10000>n<index>). Only ours:
    found by those names, and only where the owning run's pid is gone."""
    removed = []
    sessions = re.compile(re.escape(str(Path(tempfile.gettempdir()) / f"pytest-of-{getpass.getuser()}")) + r"/pytest-\d+")
    me = os.getuid()
    for pid, (_, state, command) in _processes().items():
        match = sessions.search(command)
        if not match or state == "Z" or pid == os.getpid():
            continue
        try:
            if os.stat(f"/proc/{pid}").st_uid != me:
                continue
        except OSError:
            continue
        if _dead_session(Path(match.group(0))):
            try:
                os.kill(pid, signal.SIGKILL)
                removed.append(f"process {pid}: {command[:120]}")
            except ProcessLookupError:
                pass
    if os.geteuid() == 0 and os.path.isfile("/proc/self/mounts"):  # the fault tests' tmpfs and read-only bind mounts
        with open("/proc/self/mounts") as handle:
            points = [line.split()[1].replace("\\040", " ") for line in handle]
        for point in sorted(points, key=len, reverse=True):  # the innermost first
            match = sessions.match(point)
            if match and _dead_session(Path(match.group(0))):
                subprocess.run(["umount", "--lazy", point], capture_output=True)
                removed.append(f"mount {point}")
    if shutil.which("ip") and os.geteuid() == 0:
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        pythons = {pid % 10000 for pid, (_, _, command) in _processes().items() if "python" in command}
        for name in re.findall(r"^(sdk(\d+)n(\d+))\b", listed, re.MULTILINE):
            if int(name[1]) not in pythons:  # no live Python process whose pid could have made it
                subprocess.run(["ip", "link", "del", f"sdkh{name[1]}x{name[2]}"], capture_output=True)
                subprocess.run(["ip", "netns", "del", name[0]], capture_output=True)
                removed.append(f"network namespace {name[0]}")
    return removed


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist: other pytests (the device's gpu tests) run without it
def pytest_xdist_auto_num_workers(config) -> int:
    """`-n auto` (the README's command): two workers a core, at least four: the four the suite was measured with on a
    2-core machine (six there were slower, decision 0933); where CI has more cores it uses them."""
    return max(4, 2 * (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 2))


def pytest_sessionstart(session) -> None:
    if os.environ.get("PYTEST_XDIST_WORKER") or os.environ.get("SDK_HERMETIC_SESSION") or not os.path.isdir("/proc/self"):
        return  # the controller (or a plain run) sweeps once, before any worker starts a server
    removed = sweep_stale_resources()
    if removed:
        print(f"removed what a killed earlier run left: {'; '.join(removed)}")
    if session.config.getoption("numprocesses", None):  # before pytest-xdist's own sessionstart starts the workers
        from tests.rewrite_cache import prewrite  # here: the device's selftest bundle ships this file, not that one
        asked = [Path(session.config.invocation_params.dir, arg.split("::")[0]) for arg in session.config.args]
        prewrite(session.config, [*(p for p in asked if REPO in p.resolve().parents), REPO / "sdk", REPO / "tools"], REPO)


# The slowest tests, measured (docs/performance.md, --durations), started first: pytest-xdist hands out tests in collection order,
# so a long test collected last would run alone at the end while the other workers idle. Prefixes of node ids.
SLOW_FIRST = (
    "tests/tools/deploy/test_deploy_ssh.py::test_kill_9_of_the_deploy_at_random_points_never_breaks_current",
    "tests/tools/deploy/test_deploy_int8.py::test_a_failing_gate_keeps_the_worst_layers_out_of_int8_until_it_passes",
    "tests/test_benchmarks_smoke.py",
    "tests/tools/release/test_jetpack_device.py",
    "tests/tools/deploy/test_deploy_cuda_device.py::test_cpu_cuda_and_auto_on_a_machine_without_a_gpu",
    "tests/tools/deploy/test_deploy_multicam.py::test_two_cameras_deploy_with_per_camera_detections_and_latency",
    "tests/tools/deploy/test_deploy_local.py::test_a_deploy_killed_in_every_phase_leaves_the_last_committed_release_to_start_verified",
    "tests/tools/int8/test_calibrate.py",
    "tests/tools/deploy/test_deploy_int8.py",
    "tests/tools/deploy/test_deploy_ssh.py",
    "tests/tools/validation/test_pytest_plugin.py",
    "tests/tools/history/test_gate.py",
    "tests/tools/history/test_fleet.py",
    "tests/tools/history/test_mlflow.py",
    "tests/tools/deploy/test_deploy_local.py",
    "tests/tools/models/test_init_pipeline.py",
    "tests/tools/connect/test_labgrid.py",
    "tests/sdk/cascade/test_cascade.py",
    "tests/integration",
    "tests/plugins_cuda/test_selftest_kernel_check.py",
    "tests/tools/targets/test_targets_sim.py",
    "tests/tools/int8/test_range_methods.py",
    "tests/tools/deploy/test_trial_faults.py",
    "tests/tools/targets/test_service_commands.py",
    "tests/tools/deploy/test_mender.py",
    "tests/plugins_cuda/test_release_kernels.py",
    "tests/plugins_cuda/test_build.py",
    "tests/sdk/service",
)


GROUPED_MODULE_TESTS = 10


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own, which reads the groups into the node ids
def pytest_collection_modifyitems(config, items) -> None:
    """Known-slow tests first (in the order above), then the `slow`-marked ones, then the rest; a stable sort, so
    the order is the same on every worker and every run. The few tests of a module that use one of its
    module-scoped fixtures run on one worker (an xdist group of the module's): `--dist loadgroup` hands every other
    test out on its own, and each worker that got one built the module's fixture (a deploy, a server, an emulated GPU
    check) again. A module of many such tests stays spread over the workers (it would run alone for minutes); those
    share their costly setup through `shared_folder`."""
    users: dict[str, list] = {}
    for item in items:
        if item.get_closest_marker("xdist_group") is None and _uses_a_module_fixture(item):
            users.setdefault(item.nodeid.split("::")[0], []).append(item)
    for module, group in users.items():
        if len(group) <= GROUPED_MODULE_TESTS:
            for item in group:
                item.add_marker(pytest.mark.xdist_group(f"module:{module}"))

    def rank(item) -> int:
        for index, prefix in enumerate(SLOW_FIRST):
            if item.nodeid.startswith(prefix):
                return index
        return len(SLOW_FIRST) + (0 if item.get_closest_marker("slow") else 1)

    items.sort(key=rank)


def _uses_a_module_fixture(item) -> bool:
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    return any(defs and defs[-1].scope == "module" for name in info.names_closure if (defs := info.name2fixturedefs.get(name)))


@pytest.fixture(scope="session", autouse=True)
def shared_machine_cache(tmp_path_factory):
    """What depends on this machine and this SDK, never on a test, made once for the whole run, not once per state
    folder (SDK_SHARED_CACHE, tools/state.py): the host's peaks (a deploy whose latency budget fails predicts its
    slowest layers on them; measuring them costs a few CPU-seconds) and the release runtime's bytecode. In the run's
    own temporary folder, shared by its xdist workers (each written then renamed)."""
    base = tmp_path_factory.getbasetemp()
    folder = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "shared" / "host-peaks-cache"
    folder.mkdir(parents=True, exist_ok=True)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SDK_SHARED_CACHE", str(folder))
        yield folder


def shared_folder(tmp_path_factory, name: str, build: Callable[[Path], None]) -> Path:
    """A folder built once for the whole run, shared by its xdist workers: the first to ask builds it under a lock
    (in the run's own temporary folder, never in the checkout), the others wait and reuse it. `build(folder)` fills it."""
    base = tmp_path_factory.getbasetemp()
    root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "shared"
    root.mkdir(exist_ok=True)
    folder = root / name
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (folder / ".complete").is_file():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            build(folder)
            (folder / ".complete").write_text("")
    return folder


def asset(name: str) -> Path:
    """A real asset shipped in the repository (the example's, pipelines/assets, or the tests', tests/integration/assets)."""
    for folder in (ASSETS, TEST_ASSETS):
        if (folder / name).is_file():
            return folder / name
    raise FileNotFoundError(f"asset {name} is in neither {ASSETS} nor {TEST_ASSETS}: the checkout is incomplete")


@pytest.fixture(scope="session")
def video_path() -> Path:
    return asset("vtest.avi")


@pytest.fixture(scope="session")
def detector_path() -> Path:
    return asset("ssdlite_pedestrian.onnx")


@pytest.fixture(scope="session")
def example_pipeline():
    from sdk.spec import load_pipeline

    return load_pipeline(EXAMPLE)


@pytest.fixture(scope="session")
def prepared_example(example_pipeline, tmp_path_factory):
    if (REPO / "selftest-prepared" / "example" / "prepare.json").is_file():  # in `sdk selftest`'s bundle: prepared by the host
        from sdk.artifacts import ModelArtifacts

        return ModelArtifacts(REPO / "selftest-prepared" / "example")
    from tools.models.prepare import PrepareModel

    return PrepareModel(example_pipeline, tmp_path_factory.mktemp("cache"))()


@pytest.fixture()
def state_dir(tmp_path, monkeypatch) -> Path:
    """Host state (cache, local target) in a fresh folder for this test."""
    folder = tmp_path / "state"
    monkeypatch.setenv("SDK_STATE_DIR", str(folder))
    return folder


# Three candidates in v5 layout (cx, cy, w, h, objectness, car, person) in 32 x 32 network pixels.
ROWS = np.array([[8, 8, 4, 4, 0.9, 0.1, 0.9], [24, 20, 6, 8, 0.8, 0.9, 0.1], [16, 16, 2, 2, 0.1, 0.5, 0.5]], np.float32)


def tiny_yolo(path: Path) -> Path:
    """Output = the constant rows + 0 * sum(input): input-dependent in the graph, constant in value."""
    from onnx import TensorProto, helper, numpy_helper, save  # here: the selftest runs this conftest on devices without onnx

    graph = helper.make_graph(
        [
            helper.make_node("ReduceSum", ["images"], ["total"], keepdims=0),
            helper.make_node("Mul", ["total", "zero"], ["nothing"]),
            helper.make_node("Add", ["rows", "nothing"], ["output0"]),
        ],
        "tiny_yolo",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, 32, 32])],
        [helper.make_tensor_value_info("output0", TensorProto.FLOAT, [1, 3, 7])],
        initializer=[numpy_helper.from_array(ROWS[None], "rows"), numpy_helper.from_array(np.array(0, np.float32), "zero")],
    )
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), str(path))
    return path


PIPELINE = """\
version: 1
name: tiny
source:
  uri: "{uri}"
  replay: {{rate_fps: {rate}}}
preprocess:
  resize: {{width: 32, height: 32}}
  normalize: {{scale: 0.00392156862745098}}
model:
  path: tiny.onnx
  threads: 1
postprocess:
  decoder: {{kind: yolo, output: output0, layout: v5}}
  classes: [car, person]
  score_threshold: 0.25
sinks:
  - {{kind: jsonl}}
  - {{kind: null}}
budgets:
  warmup_frames: 2
  end_to_end: {{p50_ms: 1000, max_ms: {max_ms}}}
"""


@pytest.fixture()
def tiny_pipeline(tmp_path):
    """(PipelineFile, ModelArtifacts) for a synthetic 64 x 48 source of `frames` frames."""
    from sdk.spec import load_pipeline
    from tools.models.prepare import PrepareModel

    def build(frames: int = 20, rate: str = "null", uri: str | None = None, max_ms: float = 5000):
        folder = tmp_path / "pipeline"
        folder.mkdir(exist_ok=True)
        tiny_yolo(folder / "tiny.onnx")
        text = PIPELINE.format(uri=uri or f"synthetic://boxes?width=64&height=48&frames={frames}", rate=rate, max_ms=max_ms)
        (folder / "tiny.yaml").write_text(text)
        pipeline = load_pipeline(folder / "tiny.yaml")
        return pipeline, PrepareModel(pipeline, tmp_path / "cache")()

    return build


@pytest.fixture()
def postprocess_hook(monkeypatch):
    """A test stage: the real decoder, after `hook(call)` (1-based) runs before each call: sleep to stall, raise to fail."""
    import sdk.postprocess.stage as runner_module  # the decode stage's factory makes the decoders there
    from sdk.stage import Stage

    def install(hook) -> None:
        original = runner_module.create_postprocessor

        def wrapped(*args, **kwargs):
            real = original(*args, **kwargs)

            class Hooked(Stage):
                calls = 0

                def __call__(self, geometry):
                    Hooked.calls += 1
                    hook(Hooked.calls)
                    return real(geometry)

            return Hooked()

        monkeypatch.setattr(runner_module, "create_postprocessor", wrapped)

    return install
