"""Named kill points for fault-injection tests: `SDK_FAULT=NAME` makes the process SIGKILL itself there.

Every step of activation, health check, commit, prune and rollback that changes the store on disk
calls `point(NAME)` right after it. The tests run each step in a real process with `SDK_FAULT` set to
each name in `POINTS` and check, after the kill, that recovery leaves the last committed release
current and every reachable file matching its manifest. `SDK_FAULT=NAME:K` kills at the K-th pass.
Unset (always, outside the tests), a point costs one dictionary lookup.
"""

from __future__ import annotations

import os
import signal

POINTS = (
    # a symbolic link switched, a JSON record replaced (inside every step below)
    "link.temporary-made",
    "link.switched",
    "record.temporary-written",
    "record.replaced",
    # the trial
    "trial.record-written",
    "trial.current-switched",
    "trial.health-started",
    "trial.health-running",
    "trial.health-judged",
    "trial.passed-recorded",
    "trial.failed-before-rollback",
    # commit
    "commit.state-written",
    "commit.committed-linked",
    "commit.previous-linked",
    "commit.trial-removed",
    # an aborted trial (recovery, a failed health check, a lease that ran out)
    "abort.current-linked",
    "abort.trial-removed",
    # prune
    "prune.release-moved",
    "prune.state-written",
    "prune.release-deleted",
    "prune.object-deleted",
    # rollback
    "rollback.verified",
    "rollback.state-written",
    "rollback.committed-linked",
    "rollback.current-linked",
    "rollback.previous-linked",
    # the lease
    "lease.token-written",
    "lease.recorded",
    "lease.ended-before-recovery",
)


def point(name: str) -> None:
    wanted = os.environ.get("SDK_FAULT")
    if not wanted:
        return
    target, _, count = wanted.partition(":")
    if target != name:
        return
    if count:
        key = f"SDK_FAULT_SEEN_{name}"
        seen = int(os.environ.get(key, "0")) + 1
        os.environ[key] = str(seen)
        if seen < int(count):
            return
    os.kill(os.getpid(), signal.SIGKILL)
