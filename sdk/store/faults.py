"""Named kill points for fault-injection tests: `SDK_FAULT=NAME` makes the process SIGKILL itself there.

Every step of staging, activation, health check, commit, prune, rollback, recovery and the lease's end that
changes the store on disk calls `point(NAME)` right after it. The names are declared once, here: `STATIC`, and
`TEMPLATES` (a closed set of patterns with the values each placeholder takes). `POINTS` is every name they give;
the tests derive their list from it, kill each one, and a static test checks that every `point(...)` call in
the code names a declared point or pattern (tests/sdk/store/test_kill_points.py).

`SDK_FAULT=NAME:K` kills at the K-th pass. `SDK_FAULT_TRACE=FILE` appends every point a process passes (its pid
and the name, one line each) to FILE, so a test can tell where a kill landed. Unset (always, outside the tests),
a point costs one dictionary lookup.
"""

from __future__ import annotations

import itertools
import os
import signal

STATIC = (
    # a symbolic link switched, a JSON record replaced (inside every step below)
    "link.temporary-made",
    "link.switched",
    "record.temporary-written",
    "record.replaced",
    # staging: an object verified and renamed into the store, a release folder renamed into place
    "store.object-installed",
    "store.release-assembled",
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
    # prune
    "prune.release-moved",
    "prune.state-written",
    "prune.release-deleted",
    "prune.object-deleted",
    # rollback
    "rollback.verified",
    "rollback.state-written",
    # the lease
    "lease.token-written",
    "lease.recorded",
    "lease.ended-before-recovery",
)
# The steps that re-point the links (Activation._sync_links) and end a trial (Activation._end_trial).
TEMPLATES = {
    "{step}.{link}-linked": {"step": ("commit", "abort", "recover", "rollback"), "link": ("committed", "current", "previous")},
    "{step}.trial-removed": {"step": ("commit", "abort")},
}


def expand(template: str, values: dict[str, tuple[str, ...]]) -> list[str]:
    keys = sorted(values)
    return [template.format(**dict(zip(keys, combination, strict=True))) for combination in itertools.product(*(values[k] for k in keys))]


POINTS = (*STATIC, *(name for template, values in TEMPLATES.items() for name in expand(template, values)))
_KNOWN = frozenset(POINTS)


def point(name: str) -> None:
    wanted = os.environ.get("SDK_FAULT")
    trace = os.environ.get("SDK_FAULT_TRACE")
    if not wanted and not trace:
        return
    if name not in _KNOWN:  # only under test: a point nobody declared is never silently unkillable
        raise AssertionError(f"kill point {name!r} is not declared in sdk/store/faults.py")
    if trace:
        fd = os.open(trace, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{os.getpid()} {name}\n".encode())
        finally:
            os.close(fd)
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
