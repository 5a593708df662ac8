"""The trial of a new release, owned by the device: switch, health run under a deadline, verdict.

`python -m sdk store --root R trial RELEASE --token T ...` runs all of it on the target, so that the
outcome does not depend on the host staying connected:

1. under the store's mutex and the deploy's lease: record the trial (release, the committed release
   to fall back to, owner, token, boot id, deadline) and point `current` at it;
2. run the release's own runtime for the health check (`health.min_frames` frames) in its own process
   group, which dies with this process (PR_SET_PDEATHSIG), under the device-side deadline
   `health.timeout_s`; the lease is checked while it runs;
3. healthy means: the runtime ran (it loaded the model and judged) and at least `min_frames` frames
   went through every stage to the sinks. The latency verdict is reported, and is not health.
   Anything else (timeout, hang, crash, 0 frames, a lease that ended) rolls back right here;
4. a pass is recorded, and the host has `COMMIT_WINDOW_S` to commit with its token. If it never does
   (it died, its link broke), the lease holder rolls the trial back when the lease ends, and every
   entry point that can start anything rolls back a trial past its deadline (`ReleaseStore.recover`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from sdk.durable import open_new
from sdk.errors import ReleaseError
from sdk.rootsafe import runs_as
from sdk.store.faults import point
from sdk.store.lease import FencingError, check_token
from sdk.store.objects import ReleaseStore, StoreBusy
from sdk.store.offline_env import verify_env
from sdk.store.verify import verify_release

COMMIT_WINDOW_S = 120.0  # after a pass, the host commits within this, or the trial is rolled back
POLL_S = 0.2
RECORD_WAIT_S = 10.0  # for the store's mutex to record the outcome; a stuck holder leaves the rollback to recovery


@dataclass(frozen=True)
class HealthPolicy:
    min_frames: int = 5
    timeout_s: float = 120.0


def _die_with_parent() -> None:
    """In the health child, before exec: SIGKILL when the trial process dies, whatever kills it."""
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _emit(line: str) -> None:
    """Forward to the host; a host that is gone does not stop the trial."""
    try:
        sys.stdout.write(line if line.endswith("\n") else line + "\n")
        sys.stdout.flush()
    except (BrokenPipeError, OSError, ValueError):
        pass


def health_launch(store: ReleaseStore, release_id: str, run_dir: Path, target: str, frames: int):
    from sdk.release import release_command

    release = str(store.release_dir(release_id))
    run = ["run", "--release", release, "--report-dir", str(run_dir), "--target", target, "--events", "--frames", str(frames)]
    return release_command(store.release_dir(release_id), run)


def _watch(child: subprocess.Popen, store: ReleaseStore, token: int | None, timeout_s: float) -> str | None:
    """Wait for the health run; None when it ended by itself, else why it was killed."""
    deadline = time.monotonic() + timeout_s
    first = True
    while True:
        try:
            child.wait(timeout=POLL_S)
            return None
        except subprocess.TimeoutExpired:
            pass
        if first:
            point("trial.health-running")
            first = False
        why = None
        if time.monotonic() > deadline:
            why = f"the health check did not finish within {timeout_s:g} s (health.timeout_s): the runtime hung or was too slow"
        elif token is not None:
            try:  # read without the store's mutex: a process stuck holding it must not delay the deadline
                check_token(store.root, token)
            except FencingError:
                why = "the deploy's lease on the target ended during the health check"
        if why is not None:
            try:
                os.killpg(child.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            child.wait()
            return why


def _judge(exit_code: int, killed: str | None, report: dict | None, stderr: str, min_frames: int) -> tuple[bool, str, int]:
    frames = int((report or {}).get("frames") or 0)
    if killed is not None:
        return False, killed, frames
    if exit_code not in (0, 3, 4):
        lines = [line.strip() for line in stderr.splitlines() if line.strip()]
        errors = [line.removeprefix("error:").strip() for line in lines if line.startswith("error:")]
        if exit_code > 0 and errors:
            return False, errors[-1], frames  # the runtime's own one-line error says it all
        if exit_code < 0:
            name = signal.Signals(-exit_code).name if -exit_code in signal.valid_signals() else "?"
            how = f"the runtime was killed by signal {-exit_code} ({name})"
        else:
            how = f"the runtime exited with status {exit_code}"
        return False, how + (f": {lines[-1]}" if lines else ""), frames
    if report is None:
        return False, "the runtime wrote no report", frames
    if frames < min_frames:
        last = report.get("last_error")  # why frames failed (a stage that raised on each of them), when one did
        why = f"; last stage error: {last}" if last else ""
        return False, f"only {frames} frame(s) went through the pipeline; the health check needs {min_frames} (health.min_frames){why}", frames
    return True, f"{frames} frames went through every stage", frames


def run_trial(
    store: ReleaseStore,
    release_id: str,
    *,
    token: int | None,
    owner: str,
    target: str,
    policy: HealthPolicy,
    commit_within_s: float = COMMIT_WINDOW_S,
) -> dict:
    """Begin the trial, run the health check, and record a pass or roll back. Returns the outcome.
    A pass must be committed within `commit_within_s` (a deploy commits at once; Mender when told to)."""
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # a lost SSH session must not cut the trial short
    with store.locked():
        store.verify_signature(release_id)  # a device that trusts a key checks again the release it is about to run
        verify_release(store.release_dir(release_id))  # every byte, and nothing else, before it runs
        verify_env(store.env_dir(release_id))  # and its offline environment, against the record of its build
        store.begin_trial(release_id, token=token, owner=owner, deadline_s=policy.timeout_s + commit_within_s)
    run_dir = store.run_dir(f"health-{release_id}")
    store.clear_run(run_dir.name)
    run_dir.mkdir(parents=True)
    launch = health_launch(store, release_id, run_dir, target, policy.min_frames)  # the release's own sdk and environment
    ids = runs_as(store.root)  # root (the Mender module) never executes a file of a store another user owns
    with open_new(run_dir / "health.stderr", "w+") as errors:
        if ids is not None:
            os.chown(run_dir, *ids, follow_symlinks=False)
        child = subprocess.Popen(
            launch.argv,
            cwd=launch.cwd,
            env=launch.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
            start_new_session=True,
            preexec_fn=_die_with_parent,
            **({"user": ids[0], "group": ids[1], "extra_groups": []} if ids is not None else {}),
        )
        point("trial.health-started")
        forward = threading.Thread(target=lambda: [_emit(line) for line in child.stdout], name="health-events", daemon=True)
        forward.start()
        killed = _watch(child, store, token, policy.timeout_s)
        forward.join(timeout=5)
        errors.seek(0)
        stderr = errors.read()
    try:
        report = json.loads((run_dir / "report.json").read_text())
    except (OSError, ValueError):
        report = None
    healthy, reason, frames = _judge(child.returncode, killed, report, stderr, policy.min_frames)
    point("trial.health-judged")
    health = {"healthy": healthy, "reason": reason, "frames": frames, "exit_code": child.returncode, "verdict": (report or {}).get("verdict")}
    try:
        with store.locked(wait_s=RECORD_WAIT_S):
            if healthy:
                try:
                    verify_release(store.release_dir(release_id))  # unchanged while it ran
                except ReleaseError as exc:
                    healthy, reason = False, f"its files changed during the health check: {exc.message}"
                    health = {**health, "healthy": False, "reason": reason}
            if healthy:
                try:
                    store.mark_passed(token=token, health=health, commit_within_s=commit_within_s)
                except ReleaseError as exc:  # the lease ended meanwhile: whatever is left of the trial goes
                    store.recover()
                    health = {**health, "healthy": False, "reason": exc.message}
            else:
                point("trial.failed-before-rollback")
                store.abort_trial(f"failed its health check: {reason}", token=token)
    except StoreBusy as exc:  # never recorded as passed, so never committed; the next recovery rolls it back
        why = reason if not healthy else "its pass could not be recorded"
        health = {**health, "healthy": False, "reason": f"{why}; {exc.message}: the trial is rolled back by the next start or deploy"}
    status = store.status()
    store.clear_run(run_dir.name)
    pending = not health["healthy"] and status["trial"] is not None and status["trial"].get("release") == release_id
    # pending: the rollback could not be done now (a process holds the store's mutex): `current` still names the trial
    return {"release": release_id, **health, "current": status["current"], "committed": status["committed"], "rollback_pending": pending}


def end_lease(store: ReleaseStore, holder, why: str) -> str | None:
    """The end of a deploy's lease (`store hold-lock`, the device agent): roll back this lease's own unfinished trial
    (a host that vanished mid-trial), then free the lock."""
    point("lease.ended-before-recovery")
    try:
        with store.locked(wait_s=RECORD_WAIT_S):
            rolled_back = store.abort_trial(f"the deploy that started it ended without committing ({why})", token=holder.token)
    except StoreBusy:  # a process stuck on the mutex: the lease still ends, and with it the trial (recovery rolls it back)
        rolled_back = None
    holder.end()
    return rolled_back
