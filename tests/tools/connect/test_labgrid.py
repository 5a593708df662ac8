"""A labgrid place as a target, for real: labgrid's own coordinator and exporter on loopback (started here, stopped
here), an exporter whose NetworkService is the simulated SSH target, a place matching it. The deploy and its
validation go through the place; the place is released afterwards, after a failure and after Ctrl-C (SIGINT)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import getpass
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from sdk.errors import SdkError
from tests.tools.deploy.test_deploy_ssh import tiny_copy
from tests.tools.deploy.test_trial_faults import UNPLUGGED, pipeline, processes_under, wait_until
from tools.connect.sessions import open_session
from tools.deploy.flow import Deploy
from tools.release.bundle import runtime_files
from tools.targets import resolve_target
from tools.targets.sim import free_port

REPO = Path(__file__).resolve().parents[3]
PLACE = "bench-3"
# One worker runs this module: the lab it shares (the `lab` fixture: a coordinator and an exporter) would otherwise be
# started again by each xdist worker that gets one of its tests (--dist loadgroup hands out tests one by one).
pytestmark = pytest.mark.xdist_group("labgrid")


def _require_labgrid() -> None:
    if shutil.which("labgrid-coordinator") is None or shutil.which("labgrid-exporter") is None:
        if os.environ.get("CI"):
            pytest.fail("CI must install labgrid (pip install '.[test]')")
        pytest.skip("labgrid is not installed (pip install labgrid)")


def _client(coordinator: str, *args: str, check: bool = True, env: dict | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "LG_COORDINATOR": coordinator, **(env or {})}
    return subprocess.run(["labgrid-client", "-p", PLACE, *args], env=env, capture_output=True, text=True, timeout=60, check=check)


@contextmanager
def _session(coordinator: str, **args):
    """labgrid's own client session, in this process (as `labgrid-client` opens one; `args` its command line's),
    with its own event loop, stopped and closed afterwards. A `labgrid-client` process costs almost a CPU-second of
    imports, and the tests ask the coordinator dozens of times (polling, too)."""
    from labgrid.remote.client import start_session

    session = start_session(coordinator, extra={"args": argparse.Namespace(place=PLACE, **args)})
    try:
        yield session
    finally:
        session.loop.run_until_complete(session.stop())
        session.loop.run_until_complete(session.close())
        session.loop.close()


def acquired_by(coordinator: str) -> str:
    """`None` when the place is free, else labgrid's `host/user` (the `acquired:` line of `labgrid-client show`)."""
    with _session(coordinator) as session:
        return str(session.get_place(PLACE).acquired)


def acquired_by_client(coordinator: str) -> str:
    """`acquired_by` through `labgrid-client show`, for while the SDK holds a session to the coordinator in this process:
    a second one from here would share its gRPC connection, which the coordinator refuses."""
    shown = _client(coordinator, "show").stdout
    return next(line.split(":", 1)[1].strip() for line in shown.splitlines() if line.strip().startswith("acquired:"))


def _hold(coordinator: str, action: str, user: str | None = None, check: bool = True) -> None:
    """`labgrid-client -p PLACE acquire` (or `release`) in this process, as `user` where named (labgrid's LG_USERNAME):
    the coordinator records the same `host/user` as the command's. Failing, labgrid's error, unless not `check`."""
    from labgrid.remote.client import Error

    saved = os.environ.get("LG_USERNAME")
    if user is not None:
        os.environ["LG_USERNAME"] = user
    try:
        with _session(coordinator, kick=False, allow_unmatched=False) as session, contextlib.redirect_stdout(io.StringIO()):
            session.loop.run_until_complete(getattr(session, action)())
    except Error:
        if check:
            raise
    finally:
        if saved is None:
            os.environ.pop("LG_USERNAME", None)
        else:
            os.environ["LG_USERNAME"] = saved


def _answers(coordinator: str, exporter_resource: str | None = None) -> bool:
    """Whether the coordinator answers (and knows the exporter's resource `exp/sim/CLASS`, when one is named)."""
    try:
        with _session(coordinator) as session:
            if exporter_resource is None:
                return True
            exporter, group, cls = exporter_resource.split("/")
            return cls in session.resources.get(exporter, {}).get(group, {})
    except Exception:  # noqa: BLE001 - not up yet
        return False


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


class PowerSwitch:
    """A network power switch on loopback that labgrid's `simplerest` model drives: GET /relay/<index>/<0|1>."""

    def __init__(self) -> None:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        switched: list[str] = []

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                switched.append(self.path)
                body = (self.path.rsplit("/", 1)[-1] or "1").encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.switched = switched
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/relay/{{index}}/{{value}}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


@pytest.fixture(scope="module")
def lab(sim_server, tmp_path_factory):
    """Coordinator + exporter (their own process groups, stopped at the end of the module) and place `bench-3` matching
    the exporter's NetworkService (the session's simulated SSH server) and power port (a switch on loopback): started
    once for the module, since each test leaves the place released (and `bench` kicks any holder off afterwards)."""
    _require_labgrid()
    switch = PowerSwitch()
    coordinator = f"127.0.0.1:{free_port()}"
    logs = tmp_path_factory.mktemp("labgrid")
    started = []
    try:
        started.append(_spawn(["labgrid-coordinator", "-l", coordinator], logs / "coordinator.log"))
        exporter_yaml = logs / "exporter.yaml"
        service = {"address": "127.0.0.1", "port": sim_server.port, "username": getpass.getuser()}
        power = {"model": "simplerest", "host": switch.url, "index": 0}
        exporter_yaml.write_text(yaml.safe_dump({"sim": {"NetworkService": service, "NetworkPowerPort": power}}))
        _wait(lambda: _answers(coordinator), "the coordinator to answer", started)
        started.append(_spawn(["labgrid-exporter", "-c", coordinator, "-n", "exp", str(exporter_yaml)], logs / "exporter.log"))
        _wait(lambda: _answers(coordinator, "exp/sim/NetworkPowerPort"), "the exporter's resources", started)
        with _session(coordinator, patterns=["exp/sim/NetworkService", "exp/sim/NetworkPowerPort"]) as session:
            session.loop.run_until_complete(session.add_place())  # labgrid-client -p bench-3 create
            session.loop.run_until_complete(session.add_match())  # labgrid-client -p bench-3 add-match PATTERN...
        yield SimpleNamespace(coordinator=coordinator, switch=switch)
    finally:
        for process in reversed(started):
            _stop(process)
        switch.close()


@pytest.fixture()
def power_switch(lab):
    """The lab's power switch, with no switching recorded yet."""
    lab.switch.switched.clear()
    return lab.switch


@pytest.fixture()
def bench(lab, ssh_target, power_switch):
    """The module's lab, and targets/bench-3.yaml naming its place (key and host-key pin from the sim, this test's
    remote root); the coordinator's address. Afterwards the place is free for the next test, whatever this one did."""
    sim = yaml.safe_load((ssh_target.targets / "sim.yaml").read_text())
    for key in ("host", "port", "user"):
        sim.pop(key, None)
    (ssh_target.targets / "labgrid.yaml").write_text(yaml.safe_dump(sim))  # what `--target labgrid:PLACE` shares
    sim["labgrid"] = {"coordinator": lab.coordinator, "place": PLACE}
    (ssh_target.targets / f"{PLACE}.yaml").write_text(yaml.safe_dump(sim))
    yield lab.coordinator
    if acquired_by(lab.coordinator) != "None":  # labgrid-client -p bench-3 release --kick
        with _session(lab.coordinator, kick=True) as session, contextlib.redirect_stdout(io.StringIO()):
            session.loop.run_until_complete(session.release())


def _spawn(argv: list[str], log: Path) -> subprocess.Popen:
    with log.open("w") as handle:
        # Its own working folder: the coordinator keeps places.yaml and resources.yaml there.
        return subprocess.Popen(argv, cwd=log.parent, stdout=handle, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)


def _wait(condition, what: str, started: list[subprocess.Popen], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        if any(p.poll() is not None for p in started):
            break
        time.sleep(0.3)
    raise AssertionError(f"labgrid: waited in vain for {what}")


def _interrupt(process: subprocess.Popen, timeout: float = 60) -> None:
    """Ctrl-C (SIGINT) and wait for the process to end. One still running after `timeout` is a hang: SIGABRT makes
    faulthandler (enabled by `_cli`'s environment) print every thread's stack, which the failure shows."""
    process.send_signal(signal.SIGINT)
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGABRT)
        _, err = process.communicate(timeout=30)
        raise AssertionError(f"still running {timeout:g} s after Ctrl-C; its threads:\n{(err or '')[-8000:]}") from None


def _cli(*args: str, cwd: Path) -> subprocess.Popen:
    """The CLI in its own process, as a user runs it in a terminal (stdout dropped, stderr kept for `_interrupt`).
    Ctrl-C raises KeyboardInterrupt there even when pytest itself was started in the background (`&`, nohup): such a
    shell starts it with SIGINT ignored, and a child inherits that, so Python would never see the test's SIGINT."""
    code = "import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); from tools.cli import run; sys.exit(run(sys.argv[1:]))"
    command = [sys.executable, "-c", code, *args]
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONFAULTHANDLER": "1"}
    return subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def test_deploy_and_validation_through_a_labgrid_place_then_released(bench, ssh_target, prepared_example, tmp_path, monkeypatch):
    """A deploy through the place, then the acceptance suite as a lab runs it: the place acquired by the user
    (`labgrid-client acquire`), then `pytest --lg-env ENV.yaml`. The SDK's plugin takes the place from the
    environment's RemotePlace, uses it, and leaves it acquired. The suite's pipeline is the deployed one: its own
    deploy finds the release current and sends nothing, and its validation measures it (one deploy over SSH)."""
    from tests.tools.validation.test_pytest_plugin import pytest_command
    from tests.tools.validation.test_validate import relaxed_example

    pipeline = relaxed_example(tmp_path / "p")
    # The example's model, prepared once per session (tests/conftest.py), in this test's host cache (the same key): the
    # subject is the place, not preparing (tests/tools/models/ is).
    shutil.copytree(prepared_example.folder, ssh_target.state / "cache" / "prepared" / prepared_example.folder.name)
    result = Deploy(pipeline, PLACE, frames=2, report_dir=tmp_path / "r")()
    assert result.report["verdict"] in ("PASS", "FAIL", "INCONCLUSIVE")  # the validation ran on the device
    assert (ssh_target.root / "current").exists()  # deployed into the simulated target behind the place
    assert acquired_by(bench) == "None"
    # `--target labgrid:PLACE`: the coordinator from labgrid's own LG_COORDINATOR, the rest from targets/labgrid.yaml;
    # the same device behind the place, whose current release is the one just deployed (a second deploy there would
    # send nothing and measure again, what the deploy-over-SSH tests cover). The place held while the session is open.
    monkeypatch.setenv("LG_COORDINATOR", bench)
    with open_session(resolve_target(f"labgrid:{PLACE}")) as session:
        session.ensure_agent(runtime_files())  # installed by the deploy: nothing sent
        assert session.status()["committed"] == result.staged.release_id
        assert acquired_by_client(bench) != "None"
    assert acquired_by(bench) == "None"
    env_file = tmp_path / "env.yaml"
    env_file.write_text(
        yaml.safe_dump({"targets": {"main": {"resources": {"RemotePlace": {"name": PLACE}}}}, "options": {"coordinator_address": bench}})
    )
    _hold(bench, "acquire")
    try:
        owner = acquired_by(bench)
        command = [*pytest_command(tmp_path / "tmp"), "--lg-env", str(env_file), "--pipeline", str(pipeline), "--frames", "15"]
        command += ["--acceptance-report-dir", str(tmp_path / "report")]
        env = {k: v for k, v in os.environ.items() if k != "LG_COORDINATOR"}  # the coordinator from the environment file
        done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300, env=env)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
        report = (tmp_path / "report" / "report.json").read_text()
        assert f'"target": "labgrid:{PLACE}"' in report and json.loads(report)["release"] == result.staged.release_id
        assert acquired_by(bench) == owner  # the user's acquisition, left as it was
    finally:
        _hold(bench, "release", check=False)
    assert acquired_by(bench) == "None"


def test_the_place_is_released_after_a_failed_deploy(bench, ssh_target, tmp_path):
    # Valid on the host, broken on the device (its camera does not exist there): the deploy fails in the device's health
    # check, with the place acquired. The tiny pipeline: the subject is the place, not the detector (nothing of 20 MB
    # to send, no model of its to prepare).
    broken = tiny_copy(tmp_path, uri="v4l2:///dev/video-missing")
    with pytest.raises(SdkError, match="failed its health check on bench-3: cannot open V4L2 device"):
        Deploy(broken, PLACE, frames=2, report_dir=tmp_path / "r")()
    assert acquired_by(bench) == "None"


def test_the_place_is_released_after_ctrl_c(bench, ssh_target, tmp_path):
    # A camera unplugged during the trial: the device's health check waits (up to 120 s), the place stays acquired.
    deploy = _cli("deploy", "--target", PLACE, str(pipeline(tmp_path, UNPLUGGED, timeout=120)), cwd=tmp_path)
    try:
        _wait(lambda: acquired_by(bench) != "None", "the deploy to acquire the place", [deploy], timeout=120)
        _interrupt(deploy)
    finally:
        if deploy.poll() is None:
            deploy.kill()
            deploy.wait()
    assert deploy.returncode != 0
    assert acquired_by(bench) == "None"
    assert wait_until(lambda: not processes_under(ssh_target.root), 30), processes_under(ssh_target.root)  # the device let go too


def test_a_power_cycle_goes_through_the_places_power_driver(bench, ssh_target, power_switch):
    with open_session(resolve_target(PLACE)) as session:
        session.ensure_agent(runtime_files())
        session.power_cycle(delay=0.1)
        assert power_switch.switched == ["/relay/0/0", "/relay/0/1"]  # off, then on, through labgrid's driver
        session.ensure_agent(runtime_files())  # the connection and the agent start over after the cycle
        assert "releases" in session.status()
        assert acquired_by_client(bench) != "None"
    assert acquired_by(bench) == "None"


def test_targets_check_goes_through_the_place_and_releases_it(bench, ssh_target, sdk, monkeypatch):
    done = sdk("targets", "check", PLACE)  # in this process: the process boundary is not the subject (Ctrl-C is, below)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"labgrid place: {PLACE} at {bench}: acquired for this check (released after it)" in done.stdout
    assert f"its NetworkService is {getpass.getuser()}@127.0.0.1:{ssh_target.server.port}" in done.stdout
    assert "host key" in done.stdout and "nothing blocks a deploy to bench-3" in done.stdout  # checked through its SSH address
    assert acquired_by(bench) == "None"
    monkeypatch.setenv("LG_COORDINATOR", bench)
    by_name = sdk("targets", "check", f"labgrid:{PLACE}")  # targets/labgrid.yaml + labgrid's own variable
    assert by_name.returncode == 0, by_name.stdout + by_name.stderr
    assert acquired_by(bench) == "None"


def test_targets_check_names_what_blocks_and_still_releases_the_place(bench, ssh_target, tmp_path, sdk):
    bench_file = ssh_target.targets / f"{PLACE}.yaml"
    spec = yaml.safe_load(bench_file.read_text())
    (tmp_path / "a-file").write_text("not a folder")
    bench_file.write_text(yaml.safe_dump({**spec, "remote_root": str(tmp_path / "a-file" / "sdk")}))
    done = sdk("targets", "check", PLACE)
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"blocked  remote root: {tmp_path}/a-file/sdk: {tmp_path}/a-file is a file, not a folder" in done.stdout
    assert acquired_by(bench) == "None"  # released after a blocked check too
    # Held by someone else: the check says so, and leaves their reservation alone.
    _hold(bench, "acquire", user="colleague")
    try:
        busy = sdk("targets", "check", PLACE)
        assert busy.returncode == 1, busy.stdout + busy.stderr
        assert f"blocked  labgrid place: {PLACE}: cannot acquire labgrid place '{PLACE}'" in busy.stdout
        assert acquired_by(bench).endswith("/colleague")
    finally:
        _hold(bench, "release", user="colleague", check=False)


def test_targets_check_releases_the_place_on_ctrl_c(bench, ssh_target):
    bench_file = ssh_target.targets / f"{PLACE}.yaml"
    spec = yaml.safe_load(bench_file.read_text())
    bench_file.write_text(yaml.safe_dump({**spec, "timeouts": {"connect_s": 120, "command_s": 120, "deadline_s": 300, "keepalive_s": 5}}))
    os.kill(ssh_target.server.pid, signal.SIGSTOP)  # the device hangs in the SSH handshake: the check waits, the place held
    check = _cli("targets", "check", PLACE, cwd=REPO)
    try:
        _wait(lambda: acquired_by(bench) != "None", "the check to acquire the place", [check], timeout=120)
        _interrupt(check)
    finally:
        os.kill(ssh_target.server.pid, signal.SIGCONT)
        if check.poll() is None:
            check.kill()
            check.wait()
    assert check.returncode != 0
    assert acquired_by(bench) == "None"


def test_a_ctrl_c_as_the_coordinator_grants_the_place_still_releases_it(bench, ssh_target, monkeypatch):
    """Ctrl-C (SIGINT) landing just after the coordinator granted the place, before the SDK heard the answer: the place
    is released all the same (cut there, the grant would be held by nobody's session, decision 1169)."""
    from labgrid.remote.client import ClientSession

    from tools.connect.labgrid_place import LabgridPlace

    granted = ClientSession.acquire

    async def acquire_then_ctrl_c(self):
        await granted(self)
        os.kill(os.getpid(), signal.SIGINT)  # the user's Ctrl-C, while the answer is on its way
        await asyncio.sleep(0.2)

    monkeypatch.setattr(ClientSession, "acquire", acquire_then_ctrl_c)
    # Python's own Ctrl-C handler, as in a terminal: a suite started in the background inherits SIGINT ignored.
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            LabgridPlace(bench, PLACE, PLACE).acquire()
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored
    finally:
        signal.signal(signal.SIGINT, inherited)
    assert acquired_by(bench) == "None"
