"""One service per state folder, a runtime that dies with its supervisor, stops that signal only the
service, honest terminal states, crash tracebacks in service.log: real processes and signals."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.sdk.service.service_helpers import copy_store, processes, read_json, reap, service, wait_for


@pytest.fixture()
def deployed(deployed_service) -> Path:
    return deployed_service


@pytest.fixture()
def store(deployed, tmp_path):
    store = copy_store(deployed, tmp_path / "store")
    try:
        yield store
    finally:
        reap(str(store.root))


def runtimes(store) -> list[int]:
    return processes(str(store.root / "service"), "serve")


def supervisors(store) -> list[int]:
    return processes(str(store.root / "service"), "supervise")


def test_kill_9_of_the_supervisor_takes_its_runtime_and_the_next_start_gives_exactly_one(store):
    folder = store.root / "service"
    started = service(store.root, "start", "--wait", "60")
    assert started["started"] and started["state"] == "running"
    first_supervisor, first_runtime = started["supervisor_pid"], started["runtime_pid"]
    os.kill(first_supervisor, signal.SIGKILL)
    # PR_SET_PDEATHSIG: the kernel sends the runtime SIGTERM; it stops cleanly and says why.
    wait_for(lambda: not runtimes(store), 10, "the runtime to end with its supervisor")
    final = read_json(folder / "status.json")
    assert final["pid"] == first_runtime and final["state"] == "STOPPED" and "supervisor" in final["reason"] and "gone" in final["reason"]
    now = service(store.root, "status")
    assert not now["running"] and now["state"] == "stopped" and now["runtime_pid"] is None and "orphan_runtime_pid" not in now
    assert service(store.root, "stop")["note"] == "not running"  # true now: nothing of this service runs
    again = service(store.root, "start", "--wait", "60")
    assert again["started"] and again["supervisor_pid"] != first_supervisor
    assert len(supervisors(store)) == 1 and runtimes(store) == [again["runtime_pid"]]
    stopped = service(store.root, "stop")
    assert stopped["stopped"] and not runtimes(store) and not supervisors(store)
    assert "Traceback" not in (folder / "service.log").read_text()


def test_a_frozen_runtime_left_by_a_killed_supervisor_is_stopped_before_a_new_one_starts(deployed, tmp_path):
    store = copy_store(deployed, tmp_path / "store", ("stop_timeout_s: 2", "stop_timeout_s: 0.5"))  # its SIGKILL comes sooner
    try:
        _frozen_orphan(store)
    finally:
        reap(str(store.root))


def _frozen_orphan(store) -> None:
    started = service(store.root, "start", "--wait", "60")
    orphan = started["runtime_pid"]
    os.kill(orphan, signal.SIGSTOP)  # frozen: the SIGTERM its supervisor's death sends stays pending
    os.kill(started["supervisor_pid"], signal.SIGKILL)
    wait_for(lambda: not supervisors(store), 10, "the supervisor to die")
    now = service(store.root, "status")
    assert not now["running"] and now["orphan_runtime_pid"] == orphan and now["state"] != "running"
    again = service(store.root, "start", "--wait", "60")  # stops the orphan (SIGKILL after stop_timeout_s) first
    assert again["started"] and runtimes(store) == [again["runtime_pid"]] and orphan not in runtimes(store)
    assert "left by an earlier supervisor" in (store.root / "service" / "service.log").read_text()


def test_concurrent_starts_give_one_service(store):
    command = [sys.executable, "-m", "sdk", "service", "--root", str(store.root), "start", "--wait", "60"]
    starts = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(3)]
    try:
        results = [child.communicate(timeout=120) for child in starts]
    finally:
        for child in starts:
            child.kill()
            child.wait()
    import json

    answers = [json.loads(out) for out, _ in results]
    assert sorted(bool(a["started"]) for a in answers) == [False, False, True], [e for _, e in results]
    assert {a["supervisor_pid"] for a in answers} == {next(a["supervisor_pid"] for a in answers if a["started"])}
    assert all(a["note"] == "already running" for a in answers if not a["started"])
    wait_for(lambda: len(runtimes(store)) == 1, 10, "one runtime")
    assert len(supervisors(store)) == 1 and len(runtimes(store)) == 1


def test_stop_never_signals_a_process_named_by_a_stale_pid_file_or_a_forged_lock_record(store, tmp_path):
    folder = store.root / "service"
    folder.mkdir(exist_ok=True)
    decoy = subprocess.Popen(["sleep", "120"])
    try:
        from sdk.service.instance import start_ticks

        (folder / "supervisor.pid").write_text(f"{decoy.pid}\n")  # what an earlier version left
        forged = f'{{"pid": {decoy.pid}, "start": {start_ticks(decoy.pid)}, "role": "supervisor"}}\n'
        (folder / "service.lock").write_text(forged)
        assert service(store.root, "status")["running"] is False
        assert service(store.root, "stop")["note"] == "not running"
        started = service(store.root, "start", "--wait", "60")
        assert started["started"] and started["supervisor_pid"] != decoy.pid
        (folder / "service.lock").write_text(forged)  # the record lies; the kernel's lock table does not
        assert service(store.root, "status")["supervisor_pid"] == started["supervisor_pid"]
        stopped = service(store.root, "stop")
        assert stopped["stopped"] and not supervisors(store) and not runtimes(store)
        assert decoy.poll() is None  # the unrelated process is untouched
    finally:
        decoy.kill()
        decoy.wait()


def test_a_frozen_runtime_is_stale_never_nominal_and_its_watchdog_kill_is_in_its_status(deployed, tmp_path):
    from sdk.service.control import status

    store = copy_store(deployed, tmp_path / "store", ("watchdog_s: 1.0", "watchdog_s: 2.0"))
    folder = store.root / "service"
    records: list[dict] = []
    watching = threading.Event()

    def watch() -> None:  # every status.json the runtime or the supervisor writes, however short-lived
        while not watching.is_set():
            record = read_json(folder / "status.json")
            if record and (not records or record != records[-1]):
                records.append(record)
            time.sleep(0.01)

    watcher = threading.Thread(target=watch, daemon=True)
    try:
        started = service(store.root, "start", "--wait", "60")
        wait_for(lambda: status(folder)["runtime"]["state"] == "NOMINAL", 20, "NOMINAL")
        frozen = started["runtime_pid"]
        watcher.start()
        os.kill(frozen, signal.SIGSTOP)
        frozen_at = time.monotonic()
        stale = wait_for(lambda: (s := status(folder))["state"] in ("stale", "restarting") and s, 20, "stale")
        assert stale["state"] == "stale" and stale["runtime"]["stale"] and stale["runtime"]["age_s"] > 0.4 and "old" in stale["reason"]
        wait_for(lambda: read_json(folder / "supervisor.json").get("restarts") == 1, 20, "the restart")
        # Killed by the watchdog (2 s without a frame) and restarted: measured 1.9-2.0 s at load 6-12; bound 10 s.
        assert time.monotonic() - frozen_at < 10, time.monotonic() - frozen_at
        wait_for(lambda: read_json(folder / "status.json").get("pid") not in (None, frozen), 20, "the new runtime's status")
    finally:
        watching.set()
        reap(str(store.root))
    mine = [r for r in records if r.get("pid") == frozen]
    ended = mine[-1]  # the supervisor wrote the watchdog kill into status.json before the restart
    assert ended["state"] == "FAILED" and ended["reason"].startswith("watchdog: no frame for 2 s") and ended["ended_by"] == "supervisor"
    assert "ended: watchdog" in (folder / "service.log").read_text()


def test_a_crash_of_the_runtime_or_the_supervisor_leaves_its_traceback_in_the_log(store):
    folder = store.root / "service"
    started = service(store.root, "start", "--wait", "60")
    os.kill(started["runtime_pid"], signal.SIGSEGV)  # a crash in native code: faulthandler's traceback
    wait_for(lambda: read_json(folder / "supervisor.json").get("restarts") == 1, 15, "the restart")
    state = wait_for(lambda: (s := read_json(folder / "supervisor.json")).get("state") == "running" and s, 15, "running again")
    log = (folder / "service.log").read_text()
    assert "Fatal Python error: Segmentation fault" in log and "killed by SIGSEGV" in log
    os.kill(started["supervisor_pid"], signal.SIGSEGV)
    wait_for(lambda: not supervisors(store) and not runtimes(store), 15, "both to end")
    log = (folder / "service.log").read_text()
    assert log.count("Fatal Python error: Segmentation fault") == 2 and "supervisor.py" in log
    assert read_json(folder / "status.json")["pid"] == state["child_pid"]
    assert service(store.root, "status")["state"] == "stopped"


def test_sigterm_in_any_state_is_a_clean_stop_without_traceback(deployed, tmp_path):
    """During the model load (the handler is installed first thing), and while a camera is being reconnected."""
    unplugged = "synthetic://boxes?width=64&height=48&frames=100000&live=1&fps=30&unplug_at=5&unplug_ms=600000"
    store = copy_store(deployed, tmp_path / "store", ("synthetic://boxes?width=64&height=48&frames=100000", unplugged))
    release = store.release_dir(store.committed())
    try:
        outcomes = []
        for case in ("loading", "reconnecting"):
            status_dir = tmp_path / case
            command = [sys.executable, "-m", "sdk", "serve", "--release", str(release), "--status-dir", str(status_dir)]
            child = subprocess.Popen(command, cwd=release, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            try:
                if case == "loading":
                    wait_for(lambda pid=child.pid: _catches_sigterm(pid), 20, "the handler")
                else:
                    wait_for(lambda where=status_dir: read_json(where / "status.json").get("disconnects") == 1, 30, "the unplug")
                child.send_signal(signal.SIGTERM)
                _, stderr = child.communicate(timeout=20)
            finally:
                child.kill()
                child.wait()
            outcomes.append((case, child.returncode, stderr, read_json(status_dir / "status.json")))
        for case, code, stderr, status in outcomes:
            assert code == 0 and "Traceback" not in stderr, (case, stderr)
            assert status["state"] == "STOPPED" and status["reason"] == "stopped by SIGTERM", (case, status)
    finally:
        reap(str(store.root))


def test_a_runtime_whose_supervisor_is_gone_stops_by_itself(deployed, tmp_path):
    """The parent check behind PR_SET_PDEATHSIG: a runtime that finds another parent than its supervisor stops."""
    store = copy_store(deployed, tmp_path / "store")
    release = store.release_dir(store.committed())
    status_dir = tmp_path / "status"
    command = [sys.executable, "-m", "sdk", "serve", "--release", str(release), "--status-dir", str(status_dir)]
    env = {**os.environ, "SDK_SUPERVISOR_PID": "1"}  # its parent is this test, not pid 1: the supervisor "is gone"
    done = subprocess.run(command, cwd=release, env=env, capture_output=True, text=True, timeout=60)
    status = read_json(status_dir / "status.json")
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert status["state"] == "STOPPED" and status["reason"] == "the supervisor (pid 1) is gone: stopped with it"


def _catches_sigterm(pid: int) -> bool:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) & (1 << (signal.SIGTERM - 1)))
    return False
