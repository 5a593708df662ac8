"""The runtime's status in process: a write loop that outlives write errors and says so, a heartbeat
that a hung disk cannot stop, and no NOMINAL for a runtime whose frames stopped."""

from __future__ import annotations

import errno
import json
import os
import socket
import threading
import time

import pytest

import sdk.service.status_reporter as serve_module
from sdk.runtime.health import HealthMonitor
from sdk.service.notify import Notifier
from sdk.service.status_reporter import StatusReporter
from sdk.spec.schema import DegradedMode


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def wait_until(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


@pytest.fixture()
def full_disk(monkeypatch):
    """status.json writes fail with ENOSPC while `state['full']`; `state['calls']` counts the attempts."""
    state = {"full": False, "calls": 0}
    real = serve_module.write_json_atomic

    def write(path, value):
        state["calls"] += 1
        if state["full"]:
            raise OSError(errno.ENOSPC, "No space left on device")
        real(path, value)

    monkeypatch.setattr(serve_module, "write_json_atomic", write)
    return state


def test_the_status_loop_outlives_a_full_disk_and_says_so_when_it_can_write_again(tmp_path, full_disk, capfd):
    monitor = HealthMonitor(None, DegradedMode())
    reporter = StatusReporter(tmp_path, monitor, Notifier(address=""), 0.02, {"release": "r"}, None)
    with reporter:
        full_disk["full"] = True
        calls = full_disk["calls"]
        wait_until(lambda: full_disk["calls"] >= calls + 5)  # the loop goes on failing, it does not die
        assert reporter._file_thread.is_alive()
        full_disk["full"] = False
        wait_until(lambda: (tmp_path / "status.json").exists() and json.loads((tmp_path / "status.json").read_text())["status_writes"]["written"] > 1)
    status = json.loads((tmp_path / "status.json").read_text())
    assert status["status_writes"]["failed"] >= 5 and status["status_writes"]["error"] is None  # written again: the count stays
    err = capfd.readouterr().err
    assert "cannot write status.json: disk full" in err and "written again after" in err


def test_the_heartbeat_goes_on_while_the_status_file_write_hangs(tmp_path, monkeypatch):
    address = str(tmp_path / "notify")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listener.bind(address)
    listener.settimeout(5)
    hung = threading.Event()
    release = threading.Event()

    def hanging_write(path, value):
        if hung.is_set():
            release.wait(10)  # a disk that does not answer

    monkeypatch.setattr(serve_module, "write_json_atomic", hanging_write)
    reporter = StatusReporter(tmp_path, HealthMonitor(None, DegradedMode()), Notifier(address=address), 0.02, {}, None)
    try:
        with reporter:
            hung.set()
            beats = [listener.recv(4096).decode() for _ in range(10)]  # ten heartbeats while the file thread is stuck
            release.set()
    finally:
        release.set()
        listener.close()
    assert all(beat.startswith("STATUS=") for beat in beats)


def test_a_runtime_whose_frames_stopped_is_degraded_not_nominal(tmp_path):
    clock = Clock()
    monitor = HealthMonitor(None, DegradedMode(), clock=clock)
    reporter = StatusReporter(tmp_path, monitor, Notifier(address=""), 1.0, {}, None, stall_s=0.5)
    monitor.frame(1_000_000)
    assert reporter.snapshot()["state"] == "NOMINAL"
    clock.now += 0.6
    status = reporter.snapshot()
    assert status["state"] == "DEGRADED" and status["conditions"] == ["no frame for 0.6 s"]
    monitor.frame(1_000_000)
    assert reporter.snapshot()["state"] == "NOMINAL"


def test_every_sink_is_closed_even_when_one_fails(capsys):
    from sdk.sinks import SinkGroup

    closed = []

    class Sink:
        def __init__(self, name: str, fails: bool) -> None:
            self.name, self.fails = name, fails

        def open(self) -> None:
            pass

        def close(self) -> None:
            closed.append(self.name)
            if self.fails:
                raise OSError(errno.EIO, f"{self.name} failed")

    group = SinkGroup([Sink("a", False), Sink("b", True), Sink("c", True), Sink("d", False)])
    with pytest.raises(OSError, match="c failed"), group:  # reversed order: c closes first
        pass
    assert closed == ["d", "c", "b", "a"] and "b failed" in capsys.readouterr().err


def test_service_log_is_rotated_by_size_and_keeps_its_number_of_files(tmp_path):
    from sdk.service.logfile import RESERVE_BYTES, RotatingLog

    log = RotatingLog(tmp_path / "service.log", max_bytes=4096, keep=2)
    for index in range(200):
        assert log.line(f"line {index:04d} " + "x" * 60)
    log.close()
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == [".service.log.reserve", "service.log", "service.log.1", "service.log.2"]
    assert all((tmp_path / n).stat().st_size <= 4096 for n in names[1:]) and (tmp_path / names[0]).stat().st_size == RESERVE_BYTES
    assert "line 0199" in (tmp_path / "service.log").read_text()  # the newest in service.log, the oldest gone


def test_a_supervisor_of_an_older_release_is_known_by_its_command_line_never_by_its_pid_file_alone(tmp_path):
    """Releases deployed before the locks write supervisor.pid and hold no lock: `sdk stop` must still stop
    them, and only them. A process whose command line is `sdk supervise --status-dir <this folder>` stands in."""
    import subprocess
    import sys

    from sdk.service import control

    folder = tmp_path / "service"
    folder.mkdir()
    stand_in = tmp_path / "stand-in"  # a module named sdk that only sleeps: `python -m sdk supervise ...` to the kernel
    (stand_in / "sdk").mkdir(parents=True)
    (stand_in / "sdk" / "__main__.py").write_text("import time\ntime.sleep(60)\n")
    env = {**os.environ, "PYTHONPATH": str(stand_in)}
    old = subprocess.Popen([sys.executable, "-m", "sdk", "supervise", "--status-dir", str(folder)], env=env)
    other = subprocess.Popen([sys.executable, "-m", "sdk", "supervise", "--status-dir", str(tmp_path)], env=env)
    try:
        (folder / "supervisor.pid").write_text(f"{other.pid}\n")  # another folder's: not this service
        assert control.status(folder)["running"] is False and control.stop(folder, 5)["note"] == "not running"
        (folder / "supervisor.pid").write_text(f"{old.pid}\n")
        assert control.status(folder)["supervisor_pid"] == old.pid
        assert control.stop(folder, 5)["stopped"] and old.wait(timeout=5) == -15
        assert other.poll() is None
    finally:
        for child in (old, other):
            child.kill()
            child.wait()


def test_a_lock_squatter_whose_command_line_mentions_the_supervisor_is_never_signalled(tmp_path):
    """A process that holds service.lock and whose command line mentions `-m sdk supervise --status-dir <folder>`
    (after `-c`: the interpreter runs the -c code, not the sdk) is nobody's supervisor: `sdk stop` leaves it alone."""
    import subprocess
    import sys

    from sdk.service import control

    folder = tmp_path / "service"
    folder.mkdir()
    script = "import fcntl, sys, time; f = open(sys.argv[-1] + '/service.lock', 'a'); fcntl.flock(f, 2); print(1, flush=True); time.sleep(60)"
    squatter = subprocess.Popen([sys.executable, "-c", script, "-m", "sdk", "supervise", "--status-dir", str(folder)], stdout=subprocess.PIPE)
    try:
        assert squatter.stdout.readline().strip() == b"1"
        who = control.supervisor_holder(folder)
        assert who is not None and who["pid"] == squatter.pid and who["verified"] is False
        assert control.stop(folder, 2)["stopped"] is False
        assert squatter.poll() is None  # not signalled
    finally:
        squatter.kill()
        squatter.wait()



def test_a_frozen_runtime_stays_stale_when_the_wall_clock_steps_back(tmp_path):
    """The wall clock may step (NTP, a GNSS fix, an RTC set): a status written an hour "in the future" by the wall
    clock, 30 s ago by the monotonic clock, is 30 s old: a runtime frozen since then is stale, never fresh."""
    import json
    import subprocess
    import sys

    from sdk.service import control
    from sdk.store.lease import boot_id

    folder = tmp_path / "service"
    folder.mkdir()
    script = "import fcntl, sys, time; f = open(sys.argv[1], 'a'); fcntl.flock(f, 2); print(1, flush=True); time.sleep(60)"
    frozen = subprocess.Popen([sys.executable, "-c", script, str(folder / "runtime.lock")], stdout=subprocess.PIPE)  # holds the lock
    try:
        assert frozen.stdout.readline().strip() == b"1"
        status = {"state": "NOMINAL", "pid": frozen.pid, "status_interval_s": 1.0, "frames": 10}
        written = {"time": time.time() + 3600, "monotonic": time.monotonic() - 30, "boot": boot_id()}
        (folder / "status.json").write_text(json.dumps({**status, **written}))
        runtime = control.status(folder)["runtime"]
        assert runtime["age_s"] >= 30 and runtime["stale"] is True
    finally:
        frozen.kill()
        frozen.wait()
