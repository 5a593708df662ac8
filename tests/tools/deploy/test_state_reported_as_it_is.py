"""What the device is in, reported as it is.

- A full store that also holds the service's folder, after a power cut during a trial: supervisor.json and status.json
  cannot be written, yet the service runs. `sdk start` returns as soon as the runtime is READY and says it runs, `sdk
  status` says running (and why its files are old), a second start says "already running" with that state, and no try
  leaves a temporary file behind. The supervisor's state reaches them without a disk (sdk/service/live.py).
- A trial killed by its deadline while another process holds the store's mutex is reported as not rolled back yet.
- A read-only store is said to be read-only, not busy with another deploy.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from sdk.store.objects import ReleaseStore
from tests.sdk.service.service_helpers import processes, reap, wait_for
from tests.tools.deploy import test_recovery_faults as recovery
from tests.tools.deploy.test_recovery_faults import copy_template, fill, hold_deploy_lock, hold_mutex, no_traceback, power_cut_during_trial

template, mounts, target = recovery.template, recovery.mounts, recovery.target  # the recovery tests' fixtures (target: local, SSH)

START_WAIT_S = 120  # `sdk start`'s own wait for READY: a start that does not see READY takes all of it


@pytest.mark.parametrize("target", recovery.BOTH, indirect=True)
def test_a_full_store_with_the_service_folder_on_it_starts_promptly_and_says_running(template, mounts, target, sdk):
    name, root = target
    source, ids = template
    root.mkdir(parents=True, exist_ok=True)
    mounts.run("-t", "tmpfs", "-o", "size=32m", "tmpfs", point=root)
    subprocess.run(["cp", "-a", f"{source}/.", str(root)], check=True)
    store = ReleaseStore(root)
    assert sdk("status", "--target", name, "--json").returncode == 0  # over SSH: the device agent the deploys left
    power_cut_during_trial(store, ids["C"])
    (root / "service").mkdir(exist_ok=True)
    fill(root)  # the store and the service folder: every write fails with ENOSPC from now on
    try:
        started = time.monotonic()
        done = sdk("start", "--json", "--target", name)
        took = time.monotonic() - started
        no_traceback(done)
        assert done.returncode == 0, done.stderr
        assert took < START_WAIT_S / 2, took  # READY seen, not waited out
        answer = json.loads(done.stdout)
        assert answer["started"] and answer["release"] == ids["B"], answer
        assert answer["state"] in ("running", "degraded"), answer
        assert not (root / "service" / "supervisor.json").exists()  # nothing could be written: the state came another way

        status = sdk("status", "--target", name, "--json")
        assert status.returncode == 0, status.stderr
        service = json.loads(status.stdout)["service"]
        assert service["state"] in ("running", "degraded") and "disk full" in service["reason"], service

        again = sdk("start", "--json", "--target", name)
        assert again.returncode == 0, again.stderr
        second = json.loads(again.stdout)
        assert not second["started"] and second["note"] == "already running" and second["state"] in ("running", "degraded"), second
    finally:
        sdk("stop", "--json", "--target", name)
        reap(str(root))
    assert not list(root.glob(".tmp-*")), sorted(p.name for p in root.glob(".tmp-*"))  # no empty temporary per try
    assert store.trial() is not None  # nothing could be written: the dead trial is still recorded, and it never ran


def test_a_trial_ended_by_its_deadline_under_a_held_mutex_is_reported_as_it_is(template, state_dir):
    """The health check hangs, a stuck process holds the store's mutex: the trial is killed at its deadline but cannot be
    rolled back yet. The deploy's error says so (the device rolls back to the committed release at its next start or
    deploy), never "rolled back to" the trial release that `current` still names."""
    from sdk.store.trial import HealthPolicy
    from tools.connect.session_protocol import TrialOutcome
    from tools.deploy.flow import trial_failed

    root = state_dir / "targets" / "local"
    store, ids = copy_template(template, root)
    lock = hold_deploy_lock(root, "a deploy")
    holder = None
    try:
        token = json.loads(lock.stdout.readline())["token"]
        argv = [sys.executable, "-B", "-m", "sdk", "store", "--root", str(root), "trial", ids["H"], "--token", str(token), "--owner", "a deploy"]
        trial = subprocess.Popen([*argv, "--min-frames", "5", "--timeout", "3"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_for(lambda: processes(str(root), "run"), 30, "the health check to start")
        holder = hold_mutex(root)
        out, _ = trial.communicate(timeout=60)
        outcome = TrialOutcome.parse(json.loads(out.strip().splitlines()[-1]))
        assert store.current() == ids["H"] and store.trial() is not None  # the truth on the device: not rolled back yet
        error = trial_failed(ids["H"], "local", outcome, HealthPolicy(min_frames=5, timeout_s=3))
        assert "did not finish within 3 s" in error.message
        assert f"the trial of {ids['H']} ended unfinished; the device rolls back to {ids['B']} at its next start or deploy" in error.message
        assert f"rolled back to {ids['H']}" not in error.message and "is current again" not in error.hint, (error.message, error.hint)
    finally:
        for process in (holder, lock):
            if process is not None:
                process.kill()
                process.wait()
        reap(str(root))
    assert store.committed() == ids["B"]


def test_a_read_only_store_says_it_is_read_only_not_that_another_deploy_holds_it(mounts, state_dir):
    from sdk.errors import ReleaseError
    from tools.connect.sessions import open_session
    from tools.targets import resolve_target

    root = state_dir / "targets" / "local"
    ReleaseStore(root).ensure()  # a store that was deployed to, then mounted read-only
    mounts.run("--bind", str(root), point=root)
    mounts.run("-o", "remount,bind,ro", point=root)
    with open_session(resolve_target("local")) as session, pytest.raises(ReleaseError) as caught:
        session.lock("a deploy")
    assert "Read-only file system" in caught.value.message, caught.value.message
    assert "read-only" in caught.value.hint and "wait for the other deploy" not in caught.value.hint, caught.value.hint
