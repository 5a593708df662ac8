"""What a deploy's session says to the device's store and runtime, and what it hears back: the
arguments of `python -m sdk store ...` and `python -m sdk run`, their events and outcomes. Shared by
the local and the SSH session (tools/connect/session_local.py, tools/connect/session_ssh.py).
"""

from __future__ import annotations

import json
import signal
from dataclasses import dataclass

from sdk.errors import ReleaseError, TargetError
from tools.connect.ssh import error_line

RUN_EXIT_CODES = (0, 3, 4)  # the runtime ran and judged; anything else is a failure to run


@dataclass(frozen=True)
class RunOutcome:
    exit_code: int
    stderr: str

    @property
    def ran(self) -> bool:
        return self.exit_code in RUN_EXIT_CODES

    def error(self) -> str:
        return error_line(self.stderr) or exit_text(self.exit_code)


def exit_text(code: int) -> str:
    """How a device process ended, in words (paramiko reports -1 when the channel closed without a status)."""
    if code == -1:
        return "the connection closed before the runtime reported how it ended"
    if code < 0 or code > 128:
        number = -code if code < 0 else code - 128
        name = signal.Signals(number).name if number in signal.valid_signals() else "an unknown signal"
        return f"the runtime was killed by signal {number} ({name})"
    return f"the runtime exited with status {code}"


@dataclass(frozen=True)
class TrialOutcome:
    """What the device's `store trial` answered: the health check's verdict, decided on the device."""

    healthy: bool
    reason: str
    frames: int
    current: str | None
    committed: str | None = None
    rollback_pending: bool = False  # the device could not roll back yet: `current` still names the trial

    @classmethod
    def parse(cls, answer: dict) -> TrialOutcome:
        reason, frames = str(answer.get("reason") or "no reason given"), int(answer.get("frames") or 0)
        return cls(bool(answer.get("healthy")), reason, frames, answer.get("current"), answer.get("committed"), bool(answer.get("rollback_pending")))

    def still_on_trial(self, release: str) -> bool:
        """The device could not roll back yet (another process held its store's mutex): `current` still names `release`."""
        return self.rollback_pending or (self.current == release and self.committed not in (None, release))

    def rolled_back_text(self, release: str) -> str:
        """What became of the device after a failed trial of `release`, as it is (never the trial named as rolled back to)."""
        if self.still_on_trial(release):
            return f"the trial of {release} ended unfinished; the device rolls back to {self.committed or 'no release'} at its next start or deploy"
        return f"the device rolled back to {self.current or 'no release'}"


MUTATING_OPS = ("commit", "rollback", "prune")  # they carry the lease's fencing token
LOCK_LEASE_LOCAL_S = 10.0  # the local holder also ends at once when this process dies (its stdin closes)
TRIAL_HOST_MARGIN_S = 60.0  # the host waits this much longer than the device's own health deadline


def trial_arguments(release: str, token: int, owner: str, target: str, policy) -> list[str]:
    health = ["--min-frames", str(policy.min_frames), "--timeout", f"{policy.timeout_s:g}"]
    return ["trial", release, "--token", str(token), "--owner", owner, "--target", target, *health]


def _trial_answer(lines: list[str], stderr: str, exit_code: int, where: str) -> TrialOutcome:
    for line in reversed(lines):
        answer = parse_event(line)
        if "healthy" in answer:
            return TrialOutcome.parse(answer)
    raise ReleaseError(
        f"{where}: the trial ended without a verdict: {error_line(stderr) or exit_text(exit_code)}",
        hint="the device rolls back a trial that did not pass by itself; check `sdk status --target T`",
    )


def hold_lock_arguments(owner: str, lease: float) -> list[str]:  # the local target's holder (over SSH: the agent holds it)
    return ["hold-lock", owner, "--lease", f"{lease:g}", "--wait", f"{lease + 2:g}"]


def lock_hint(message: str) -> str:
    """What to do when the deploy lock could not be taken: wait only where another deploy holds it."""
    text = message.lower()
    if "read-only" in text:
        return "the target's store is read-only (a read-only mount?): make its remote_root writable, then deploy again"
    if "no space left" in text or "disk full" in text:
        return "the target's disk is full: free space under its remote_root, then deploy again"
    if "permission denied" in text:
        return "the login cannot write the target's store: check the owner of its remote_root"
    return "wait for the other deploy to finish"


def _locked(process, owner: str, timeout: float, where: str) -> int:
    """The token from the holder's first line, or the holder's own error."""
    try:
        line = process.read_line(timeout=timeout)
    except TargetError:
        line = ""
    answer = parse_event(line)
    if answer.get("locked") != owner or not isinstance(answer.get("token"), int):
        stderr = process.close()
        message = error_line(stderr) or "cannot take the deploy lock"
        raise ReleaseError(f"{where}: {message}", hint=lock_hint(message))
    return answer["token"]


def run_arguments(
    release: str, run_dir: str, target: str, frames: int | None, stress: str | None = None, live_view: int | None = None, evaluate: str | None = None
) -> list[str]:
    """`evaluate`: a folder on the device of images to run an evaluation on (sdk.runtime.evaluation_run)."""
    argv = ["run", "--release", release, "--report-dir", run_dir, "--target", target, "--events"]
    argv += ["--evaluate", evaluate] if evaluate is not None else []
    argv += ["--frames", str(frames)] if frames is not None else []
    argv += ["--live-view", str(live_view)] if live_view is not None else []
    return argv + (["--stress", stress] if stress else [])


def parse_event(line: str) -> dict:
    try:
        event = json.loads(line)
    except ValueError:
        return {}
    return event if isinstance(event, dict) else {}
