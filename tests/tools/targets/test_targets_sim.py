"""`sdk targets sim` and `--stop`: the simulated target's file goes with its server, and no sshd is left running.
And the session guard (tests/conftest.py) finds the processes a test run left behind."""

from __future__ import annotations

import getpass
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import leftover_processes
from tools.targets.sim import SimServer, _alive

REPO = Path(__file__).resolve().parents[3]
CLI = [sys.executable, "-c", "from tools.cli import main; main()"]


def test_sim_then_stop_leaves_no_target_file_and_no_server(tmp_path):
    env = {**os.environ, "SDK_TARGETS_DIR": str(tmp_path / "targets"), "SDK_STATE_DIR": str(tmp_path / "state"), "COLUMNS": "300"}
    server = SimServer(tmp_path / "state" / "sim")
    try:
        started = subprocess.run([*CLI, "targets", "sim"], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
        assert started.returncode == 0, started.stderr
        pid = server.pid
        assert pid is not None and _alive(pid) and (tmp_path / "targets" / "sim.yaml").is_file()
        stopped = subprocess.run([*CLI, "targets", "sim", "--stop"], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
        assert stopped.returncode == 0, stopped.stderr
        assert not (tmp_path / "targets" / "sim.yaml").exists() and not _alive(pid)
    finally:
        server.stop()



def test_stop_ends_a_connection_whose_client_went_silent_and_the_command_it_runs(tmp_path):
    """sshd's listener leaves its connections running when it ends: one whose client went silent (a cable pulled in a
    network namespace; here a client stopped with SIGSTOP) outlived the suite as `sshd: root@notty`. stop() ends the
    connection's processes and the command they run as well as the listener."""
    server = SimServer(tmp_path / "h").start()
    client_code = (
        "import paramiko, sys, time\n"
        "c = paramiko.SSHClient(); c.load_host_keys(sys.argv[1])\n"
        "c.connect(sys.argv[2], port=int(sys.argv[3]), username=sys.argv[4], key_filename=sys.argv[5], allow_agent=False, look_for_keys=False)\n"
        "_, out, _ = c.exec_command('echo $$; exec sleep 600')\n"
        "print(out.readline().strip(), flush=True); time.sleep(600)\n"
    )
    args = [str(server.known_hosts), server.address, str(server.port), getpass.getuser(), str(server.client_key)]
    client = subprocess.Popen([sys.executable, "-c", client_code, *args], stdout=subprocess.PIPE, text=True)
    try:
        command = int(client.stdout.readline())
        listener = server.pid
        assert _alive(command) and listener is not None
        os.kill(client.pid, signal.SIGSTOP)  # silent from now on: its TCP connection stays open
        server.stop()
        assert not _alive(listener) and not _alive(command)
    finally:
        client.kill()
        client.wait()
        server.stop()

def test_sim_never_replaces_a_target_file_it_did_not_write(tmp_path):
    env = {**os.environ, "SDK_TARGETS_DIR": str(tmp_path / "targets"), "SDK_STATE_DIR": str(tmp_path / "state")}
    (tmp_path / "targets").mkdir()
    (tmp_path / "targets" / "sim.yaml").write_text("# my own device called sim\n")
    for argv in (["targets", "sim"], ["targets", "sim", "--stop"]):
        done = subprocess.run([*CLI, *argv], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 1 and "is not a simulated target's file; not touched" in done.stderr
    assert (tmp_path / "targets" / "sim.yaml").read_text() == "# my own device called sim\n"
    assert not (tmp_path / "state" / "sim").exists()


def test_the_session_guard_finds_a_child_and_a_daemon_naming_the_session_folder(tmp_path_factory, tmp_path):
    basetemp = tmp_path_factory.getbasetemp()
    child = subprocess.Popen(["sleep", "60"])
    # A daemon: re-parented away from pytest (double fork), found by its command line naming the session's folder.
    marker = tmp_path / "daemon-marker"
    daemonize = "import os, time\nif os.fork():\n    os._exit(0)\ntime.sleep(60)"
    subprocess.run([sys.executable, "-c", daemonize, str(marker)], start_new_session=True, check=True)
    try:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            left = leftover_processes(basetemp)
            if child.pid in left and any(str(marker) in command for command in left.values()):
                break
            time.sleep(0.05)
        else:
            pytest.fail(f"not found: {left}")
        elsewhere = leftover_processes(basetemp.parent / "pytest-of-nobody-else")
        assert child.pid in elsewhere and not any(str(marker) in command for command in elsewhere.values())  # only this session's folder
    finally:
        child.kill()
        child.wait()
        for pid, command in leftover_processes(basetemp).items():
            if str(marker) in command:
                os.kill(pid, 9)
    deadline = time.monotonic() + 5
    while any(str(marker) in c for c in leftover_processes(basetemp).values()) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = leftover_processes(basetemp)  # (a session's shared sshd may still be listed: it ends with the session)
    assert child.pid not in left and not any(str(marker) in command for command in left.values()), "this test cleans up after itself"


def test_a_session_that_leaves_a_process_running_fails_and_the_process_is_killed(tmp_path):
    (tmp_path / "test_leak.py").write_text(
        "import subprocess\n\ndef test_leaks(tmp_path):\n    (tmp_path.parent / 'pid').write_text(str(subprocess.Popen(['sleep', '300']).pid))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.conftest", "-p", "no:cacheprovider", "--basetemp", str(tmp_path / "base"), "test_leak.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stdout
    assert "processes left running (now killed)" in done.stdout and "sleep 300" in done.stdout
    assert not _alive(int(next((tmp_path / "base").rglob("pid")).read_text()))


def test_the_start_of_a_run_unmounts_what_a_killed_run_mounted_in_its_folder(tmp_path, monkeypatch):
    """A run killed inside a full or read-only store test (SIGKILL, a CI timeout) leaves its mounts; the next run's
    start removes them, innermost first, and leaves a live run's mounts alone."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    from tests.conftest import sweep_stale_resources

    monkeypatch.setattr("tempfile.gettempdir", lambda: str(tmp_path))
    runs = tmp_path / f"pytest-of-{getpass.getuser()}"
    dead, live = runs / "pytest-7", runs / "pytest-8"
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        (dead / "store").mkdir(parents=True)
        (live / "store").mkdir(parents=True)
        (dead / ".lock").write_text(str(sleeper.pid))
        (live / ".lock").write_text(str(os.getpid()))
        points = [dead / "store", dead / "store" / "service", live / "store"]
        try:
            for point in points:
                point.mkdir(exist_ok=True)  # (the inner one, inside the outer tmpfs)
                subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(point)], check=True)
            sleeper.kill()
            sleeper.wait()
            removed = sweep_stale_resources()
            assert [line for line in removed if line.startswith("mount ")] == [f"mount {points[1]}", f"mount {points[0]}"]
            mounted = Path("/proc/self/mounts").read_text()
            assert f" {live / 'store'} " in mounted and f" {dead / 'store'} " not in mounted
        finally:
            for point in reversed(points):
                subprocess.run(["umount", "--lazy", str(point)], capture_output=True)
    finally:
        sleeper.kill()
        sleeper.wait()
