"""`sdk start|status|logs|stop --target T`, locally and over real SSH, on a deployed tiny pipeline."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from tools.deploy.flow import Deploy

SERVICE = "\nservice: {watchdog_s: 2.0, status_interval_s: 0.2, stop_timeout_s: 5}\n"


def run_service_cycle(sdk, target: str, while_running=None) -> None:
    """start, status, start again, (`while_running()`, the service running), stop, logs, stop again."""
    started = sdk("start", "--json", "--target", target)
    assert started.returncode == 0, started.stderr
    state = json.loads(started.stdout)
    assert state["running"] and state["supervisor"]["state"] == "running"
    status = json.loads(sdk("status", "--target", target, "--json").stdout)
    assert status["current"] and status["service"]["running"] and status["service"]["runtime"]["state"] in ("NOMINAL", "STARTING")
    readable = sdk("status", "--target", target).stdout.splitlines()  # without --json: a few lines a person reads
    assert readable[0] == f"{target}: release {status['current']} is current (committed); previous {status['previous'] or 'none'}", readable
    assert any(line.startswith("  service: running (supervisor pid ") for line in readable) and not readable[0].startswith("{"), readable
    twice = sdk("start", "--target", target).stdout.splitlines()  # as a person runs it: one line
    assert len(twice) == 1 and twice[0].startswith(f"{target}: already running: running (supervisor pid "), twice
    if while_running is not None:
        while_running()
    stopped = sdk("stop", "--target", target)  # as a person runs it: a few lines, not the store's JSON
    assert stopped.returncode == 0, stopped.stderr
    assert stopped.stdout.splitlines()[0] == f"{target}: service stopped" and len(stopped.stdout.splitlines()) <= 10, stopped.stdout
    assert json.loads(sdk("status", "--target", target, "--json").stdout)["service"]["runtime"]["state"] == "STOPPED"
    logs = sdk("logs", "--target", target, "--lines", "20")
    assert logs.returncode == 0
    runtime = [line for line in logs.stdout.splitlines() if " [runtime " in line]  # the runtime's own lines, beside the supervisor's
    assert any("serving pipeline tiny, release " in line and "synthetic://boxes" in line for line in runtime), logs.stdout
    assert any("state none -> " in line for line in runtime) and "ended (STOPPED): " in runtime[-1], logs.stdout
    again = sdk("stop", "--json", "--target", target)
    assert json.loads(again.stdout)["note"] == "not running"
    said = sdk("stop", "--target", target).stdout.splitlines()
    assert said == [f"{target}: nothing stopped: not running (service stopped)"], said  # an ended service: said first, not hidden


def long_running(tiny_pipeline) -> Path:
    pipeline, _ = tiny_pipeline(rate=30, uri="synthetic://boxes?width=64&height=48&frames=100000")
    pipeline.path.write_text(pipeline.path.read_text() + SERVICE)
    return pipeline.path


@pytest.mark.slow
def test_service_commands_on_the_local_target_then_a_deploy_pauses_the_service_and_restarts_it_on_the_new_release(
    tiny_pipeline, tmp_path, state_dir, sdk
):
    """The commands' cycle on a deployed local target; while its service runs, a deploy of a new release pauses it and
    restarts it on that release (one deploy of the first release and one start of its service serve both). The first
    deploy goes through the CLI: on the local target (a laptop) it never asks for root."""
    refused = sdk("start", "--json", "--target", "local")
    assert refused.returncode == 1 and "no release has passed its health check" in refused.stderr
    path = long_running(tiny_pipeline)
    done = sdk("deploy", "--target", "local", str(path), "--frames", "3", "--report-dir", str(tmp_path / "r1"))
    assert done.returncode in (0, 4), done.stderr
    assert "sudo" not in done.stdout + done.stderr and "service unit" not in done.stdout  # a laptop is never asked for root
    first_id = json.loads(sdk("status", "--target", "local", "--json").stdout)["current"]
    unit = state_dir / "targets" / "local" / "units" / "perception-tiny.service"
    assert "WatchdogSec=2" in unit.read_text()  # the deploy rendered the unit of the release it committed

    def a_deploy_restarts_the_service_on_its_release() -> None:
        before = json.loads(sdk("status", "--target", "local", "--json").stdout)["service"]
        assert before["running"] and before["supervisor"]["release"].endswith(first_id)
        path.write_text(path.read_text() + "# a new release\n")
        second = Deploy(path, "local", frames=3, report_dir=tmp_path / "r2")()
        assert second.staged.release_id != first_id
        after = json.loads(sdk("status", "--target", "local", "--json").stdout)["service"]
        assert after["running"] and after["supervisor_pid"] != before["supervisor_pid"]
        assert after["supervisor"]["release"].endswith(second.staged.release_id)

    run_service_cycle(sdk, "local", while_running=a_deploy_restarts_the_service_on_its_release)


@pytest.mark.slow
def test_start_on_a_replay_says_what_it_will_do_and_that_it_ends_with_the_clip(tiny_pipeline, tmp_path, state_dir, sdk):
    pipeline, _ = tiny_pipeline(frames=60, rate="30")
    pipeline.path.write_text(pipeline.path.read_text() + SERVICE)
    Deploy(pipeline.path, "local", frames=3, report_dir=tmp_path / "r")()
    started = sdk("start", "--json", "--target", "local")
    assert started.returncode == 0, started.stderr
    clip = "synthetic://boxes?width=64&height=48&frames=60"
    said = f"replaying {clip} once (60 frames at 30 fps, about 2 s): the service stops by itself when the clip ends"
    assert f"local: {said}" in started.stderr and json.loads(started.stdout)["plan"].startswith(said)
    deadline = time.monotonic() + 60
    # The supervisor says `stopped` a moment before it lets go of its lock and exits (`running` until then).
    while (service := json.loads(sdk("status", "--target", "local", "--json").stdout)["service"])["state"] != "stopped" or service["running"]:
        assert time.monotonic() < deadline, service
        time.sleep(0.2)
    assert service["runtime"]["frames"] == 60  # ended with the clip, not restarted


def published_runs(output: Path) -> list[list[int]]:
    from sdk.sinks.files import finished_files

    runs = []
    for path in finished_files(output / "detections.jsonl"):
        data = path.read_bytes()
        assert b"\0" not in data and data.endswith(b"\n"), path  # no hole, no torn line
        runs.append([json.loads(line)["frame"] for line in data.decode().splitlines()])
    return runs


@pytest.mark.slow
def test_service_commands_over_real_ssh_then_kill_9_of_the_runtime_and_the_supervisor_then_start_gives_exactly_one_runtime(
    tiny_pipeline, tmp_path, ssh_target, sdk
):
    """Over the simulated SSH target, on one deploy: the deploy cannot create the unit's user (no root), and says so to
    a vehicle with the command instead of failing silently; the commands' cycle; then kill -9 of the runtime
    (restarted by its supervisor), then of the supervisor (its runtime stops with it); `sdk start` afterwards runs
    exactly one runtime, and every run's detections are published whole, the killed run's up to its last sync at least."""
    import pwd

    from tests.sdk.service.service_helpers import processes, reap

    done = sdk("deploy", "--target", ssh_target.name, str(long_running(tiny_pipeline)), "--frames", "3", "--report-dir", str(tmp_path / "r"))
    assert done.returncode in (0, 4), done.stderr
    unit = ssh_target.root / "units" / "perception-tiny.service"
    assert "Type=notify" in unit.read_text() and "User=perception" in unit.read_text()
    try:
        pwd.getpwnam("perception")  # such a user exists: the note is not due
    except KeyError:
        note = " ".join(done.stdout.split())  # one note, wrapped or not
        assert f"to run this pipeline as a systemd service on the vehicle: the unit {unit} runs as user perception (not created yet)" in note
        assert f"once, as root on the device: sudo /usr/local/sbin/perception-sdk-root service --root {ssh_target.root} install" in note
        assert "sdk export --root-tool DIR" in note and "sudo env PYTHONPATH" not in note  # never the login's copy as root
    run_service_cycle(sdk, ssh_target.name)
    folder = ssh_target.root / "service"
    mark = str(folder)
    cycled = len(published_runs(folder / "output"))  # the cycle's run

    def status() -> dict:
        try:
            return json.loads((folder / "status.json").read_text())
        except (OSError, ValueError):
            return {}

    def wait(predicate, what: str, timeout: float = 60):
        deadline = time.monotonic() + timeout
        while not (value := predicate()):
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            time.sleep(0.05)
        return value

    try:
        started = sdk("start", "--json", "--target", ssh_target.name)
        assert started.returncode == 0, started.stderr
        first = json.loads(started.stdout)
        runtime, supervisor = first["runtime_pid"], first["supervisor_pid"]
        jsonl = lambda: next((o for o in status().get("outputs", []) if o["output"] == "detections.jsonl"), {})  # noqa: E731
        synced = wait(lambda: status().get("pid") == runtime and (jsonl().get("synced_frame") or 0) >= 30 and jsonl()["synced_frame"], "a sync")
        os.kill(runtime, signal.SIGKILL)
        wait(lambda: status().get("pid") not in (None, runtime) and (jsonl().get("written") or 0) >= 10, "the restarted runtime's frames")
        os.kill(supervisor, signal.SIGKILL)
        wait(lambda: not processes(mark, "serve") and not processes(mark, "supervise"), "the runtime to end with its supervisor")
        again = sdk("start", "--json", "--target", ssh_target.name)
        assert again.returncode == 0, again.stderr
        result = json.loads(again.stdout)
        assert result["started"] and processes(mark, "supervise") == [result["supervisor_pid"]]
        assert processes(mark, "serve") == [result["runtime_pid"]] and result["runtime_pid"] not in (runtime, supervisor)
        assert sdk("stop", "--json", "--target", ssh_target.name).returncode == 0
    finally:
        reap(mark)
    runs = published_runs(folder / "output")[cycled:]
    assert cycled == 1 and len(runs) == 3, [len(run) for run in runs]  # the killed run (published by the restart), the orphaned run, the last run
    assert runs[0][: synced + 1] == list(range(synced + 1))  # everything synced before the kill
    assert all(run == list(range(len(run))) for run in runs)  # each run whole and in order


def test_a_deploy_holds_the_lease_from_the_pause_to_the_restart_so_a_second_target_file_waits(tmp_path, monkeypatch):
    """Two target files naming one device measure one at a time: the first's lease spans its trial, its measured run and
    the service's restart; another deploy or validation of the same store (here: its lock holder) is refused meanwhile."""
    from sdk.errors import ReleaseError
    from sdk.store.objects import ReleaseStore
    from tools.connect.sessions import LocalSession, paused_service
    from tools.targets import LocalTarget

    root = tmp_path / "device"
    first, second = LocalSession(LocalTarget("local", root)), ReleaseStore(root)
    with paused_service(first, owner="first target file"):
        assert first.token is not None
        with pytest.raises(ReleaseError, match="the target is busy: first target file since"):
            second.acquire("second target file")  # what the second file's deploy asks first
    holder = second.acquire("second target file")  # free again once the first deploy restarted what it paused
    holder.end()
