"""`python -m sdk service --root DIR (start|stop|status|logs|unit|install)`: the current release's service on a target.

Without systemd (containers, the simulated target, a bench board) `start` launches the
supervisor detached (its own session, so an SSH disconnect does not end it) and waits until the
runtime reports READY or fails; `stop` sends SIGTERM and waits for the bounded shutdown. Who runs
is known from the locks the supervisor and the runtime hold (sdk/service/instance.py), never from
a PID file: a signal goes only to a process verified as the lock's holder. With
systemd the rendered unit (service/<pipeline>.service) is what `systemctl` runs; installing it is
a one-time root step (see the README). Prints one JSON object, like `store`.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from sdk.errors import TargetError
from sdk.service.files import LOG_FILE, PID_FILE, STATUS_FILE, SUPERVISOR_FILE, read_json, status_age
from sdk.service.instance import RUNTIME_LOCK, SERVICE_LOCK, holder, legacy_supervisor, stop_holder
from sdk.service.live import ask
from sdk.store.objects import ReleaseStore

SERVICE_DIR = "service"
EXIT_ALREADY_RUNNING = 75  # sdk.service.supervisor's (not imported: it needs more than the standard library)


STALE_AFTER_INTERVALS = 2  # a status older than two write intervals is stale: its writer stopped or froze
DEPLOY_WAIT_S = 10.0  # `sdk start` waits this long for a deploy holding the target, then says who holds it


def supervisor_holder(folder: Path) -> dict | None:
    """The holder of the service lock (sdk/service/instance.py); else a verified supervisor of a release
    deployed before the lock (it left supervisor.pid); None when no supervisor runs here."""
    return holder(folder / SERVICE_LOCK, "supervisor") or legacy_supervisor(folder, PID_FILE)


def supervisor_pid(folder: Path) -> int | None:
    who = supervisor_holder(folder)
    return who["pid"] if who is not None else None


def status(folder: Path) -> dict:
    """What runs, verified by its lock; the runtime's last status with its age, stale when its writer stopped.

    `state` says it in one word: running, degraded, stale (the runtime stopped writing: frozen, or
    its disk is full), starting, restarting, stopped, failed, or not running."""
    service_holder = supervisor_holder(folder)
    runtime_holder = holder(folder / RUNTIME_LOCK, "runtime")
    supervisor = read_json(folder / SUPERVISOR_FILE)
    live = ask(service_holder["pid"]) if service_holder and service_holder.get("verified") else None
    supervisor = live or supervisor  # asked of the supervisor itself (sdk/service/live.py): a full disk refuses its file
    runtime = read_json(folder / STATUS_FILE)
    running = service_holder is not None
    result: dict = {
        "running": running,
        "supervisor_pid": service_holder["pid"] if service_holder else None,
        "runtime_pid": runtime_holder["pid"] if runtime_holder else None,
        "supervisor": supervisor,
        "runtime": runtime,
    }
    if runtime is not None:
        interval = runtime.get("status_interval_s") or 1.0
        age = status_age(runtime)
        runtime["age_s"] = age
        ended = runtime.get("state") in ("STOPPED", "FAILED")
        runtime["stale"] = bool(not ended and (age is None or age > STALE_AFTER_INTERVALS * interval or runtime_holder is None))
    if supervisor is not None:
        supervisor["age_s"] = status_age(supervisor)
    if runtime_holder is not None and not running:
        result["orphan_runtime_pid"] = runtime_holder["pid"]  # outlived its supervisor; `stop` ends it, `start` too
    result["state"], result["reason"] = _from_heartbeat(supervisor, runtime) or _summary(running, supervisor, runtime)
    result["last_error"] = (runtime or {}).get("last_error") or (supervisor or {}).get("last_error")
    return result


def _from_heartbeat(supervisor: dict | None, runtime: dict | None) -> tuple[str, str] | None:
    """The state from the runtime's heartbeat, which reaches the supervisor without a disk, where status.json could not
    be written (a full disk) or is not this runtime's; None where the file speaks for it, or the heartbeat is old too."""
    supervisor = supervisor or {}
    beat = supervisor.get("heartbeat") if supervisor.get("live") and supervisor.get("state") == "running" else None
    if not beat:
        return None
    interval = supervisor.get("status_interval_s") or 1.0
    if not isinstance(beat.get("age_s"), (int, float)) or beat["age_s"] > STALE_AFTER_INTERVALS * interval:
        return None  # no fresh heartbeat either (a frozen runtime): what the files say stands
    said = str(beat.get("status") or "")
    unwritten = said.partition(f"{STATUS_FILE} not written: ")[2]
    if runtime and runtime.get("pid") == beat.get("pid") and not unwritten:
        return None  # the file is this runtime's and was written: its age says the rest
    why = unwritten or supervisor.get("state_write_error") or f"none of runtime pid {beat.get('pid')} yet"
    return ("degraded" if said.startswith("DEGRADED") else "running"), f"status file could not be written: {why}; the runtime's heartbeat: {said}"


def _summary(running: bool, supervisor: dict | None, runtime: dict | None) -> tuple[str, str | None]:
    supervisor, runtime = supervisor or {}, runtime or {}
    reason = runtime.get("reason") or supervisor.get("last_reason")
    if not running:
        if supervisor.get("state") == "failed" or runtime.get("state") == "FAILED":
            return "failed", reason
        if supervisor.get("state") == "stopped" or runtime.get("state") == "STOPPED":
            return "stopped", reason
        return "not running", reason
    if supervisor.get("state") in ("starting", "restarting") and (not runtime or runtime.get("state") in ("FAILED", "STOPPED")):
        return supervisor["state"], reason
    if not runtime:
        return "starting", None
    if runtime.get("stale"):
        return "stale", f"status.json is {runtime.get('age_s')} s old (written every {runtime.get('status_interval_s')} s)"
    if runtime.get("state") == "DEGRADED":
        return "degraded", "; ".join(runtime.get("conditions") or []) or "deadline misses"
    if runtime.get("state") == "STARTING":  # READY came (the first frame) before the runtime's next status
        return ("running" if supervisor.get("state") == "running" else "starting"), None
    if runtime.get("state") in ("FAILED", "STOPPED"):
        return supervisor.get("state") or "restarting", reason
    return "running", None


def start(store: ReleaseStore, folder: Path, wait_s: float, frames: int | None = None, token: int | None = None) -> dict:
    """Start the supervisor of the release that may start (sdk/store/startable.py: the committed release, found by
    reading and verified); the supervisor's lock decides who runs. Of two starts at the same moment one
    supervisor takes the lock and the other exits before it touches anything. Never beside a deploy's trial
    or measured run: the deploy lock is checked first (`token`: the deploy itself restarts its paused service)."""
    from sdk.release import release_command
    from sdk.store.lease import deploy_excluded
    from sdk.store.startable import resolve_startable

    if supervisor_pid(folder) is not None:
        return {**status(folder), "started": False, "note": "already running"}
    with deploy_excluded(store.root, token, DEPLOY_WAIT_S):
        chosen = resolve_startable(store)
        folder.mkdir(parents=True, exist_ok=True)
        command = ["supervise", "--root", str(store.root.resolve()), "--status-dir", str(folder)] + (["--frames", str(frames)] if frames else [])
        launch = release_command(chosen.folder, command)  # the release's own sdk, not the agent's
        with (folder / LOG_FILE).open("ab") as log:
            detached = {"stdin": subprocess.DEVNULL, "stdout": log, "stderr": log, "start_new_session": True}
            child = subprocess.Popen(launch.argv, cwd=launch.cwd, env=launch.env, **detached)
    chosen_text = {"release": chosen.release, **({"notes": list(chosen.notes)} if chosen.notes else {})}
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        code = child.poll()
        if code == EXIT_ALREADY_RUNNING:  # the other start won the lock
            return {**status(folder), "started": False, "note": "already running"}
        supervisor = ask(child.pid, 0.5) or read_json(folder / SUPERVISOR_FILE) or {}  # itself first: a full disk refuses the file
        if supervisor.get("pid") == child.pid:  # this start's supervisor, not a file left by an earlier one
            if supervisor.get("state") in ("running", "stopped"):
                plan = (supervisor.get("source") or {}).get("plan")
                return {**status(folder), "started": True, **chosen_text, **({"plan": plan} if plan else {})}
            if supervisor.get("state") == "failed":
                break
        if code is not None:
            break
        time.sleep(0.1)
    now = status(folder)
    detail = (now["runtime"] or {}).get("last_error") or (now["supervisor"] or {}).get("last_reason") or "no READY in time"
    raise TargetError(f"the service of release {chosen.release} did not start: {detail}", hint=f"see {folder / LOG_FILE} (sdk logs --target T)")


def stop(folder: Path, wait_s: float) -> dict:
    """SIGTERM the verified lock holder (never a PID read from a file alone) and wait for its lock to go;
    a runtime that outlived its supervisor is stopped the same way, SIGKILL after the wait."""
    try:
        stopped = stop_holder(folder / SERVICE_LOCK, "supervisor", wait_s, who=supervisor_holder(folder))
    except PermissionError:  # the locked-down unit runs as its own user: only systemd (root) may stop it
        units = sorted(p.name for p in (folder.parent / "units").glob("perception-*.service"))
        name = units[0] if units else "perception-PIPELINE.service"
        raise TargetError(
            f"the service runs as another user (systemd's {name}): this login may not signal it", hint=f"sudo systemctl stop {name}"
        ) from None
    if stopped is not None and not stopped["stopped"]:
        raise TargetError(
            f"the supervisor (pid {stopped['pid']}) did not stop within {wait_s:g} s", hint="it keeps trying; check sdk logs --target T"
        )
    orphan = stop_holder(folder / RUNTIME_LOCK, "runtime", wait_s, kill_after=True)
    if stopped is None and orphan is None:
        now = status(folder)
        note = "not running" if now["supervisor_pid"] is None else "not stopped: the lock holder could not be verified"
        return {**now, "stopped": False, "note": note}
    return {**status(folder), "stopped": True, **({"orphan_runtime_stopped": orphan["pid"]} if orphan else {})}


def logs(folder: Path, lines: int) -> dict:
    try:
        text = (folder / LOG_FILE).read_text(errors="replace")
    except FileNotFoundError:
        text = ""
    return {"log": str(folder / LOG_FILE), "lines": text.splitlines()[-lines:]}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m sdk service")
    parser.add_argument("--root", type=Path, required=True)
    ops = parser.add_subparsers(dest="op", required=True)
    start_parser = ops.add_parser("start")
    start_parser.add_argument("--wait", type=float, default=120.0)
    start_parser.add_argument("--frames", type=int, default=None)
    start_parser.add_argument("--token", type=int, default=None, help="the deploy lease's fencing token: the deploy restarts the service it paused")
    ops.add_parser("stop").add_argument("--wait", type=float, default=30.0)
    ops.add_parser("status")
    ops.add_parser("logs").add_argument("--lines", type=int, default=100)
    ops.add_parser("unit").add_argument("--user", default=None)
    install_parser = ops.add_parser("install")
    install_parser.add_argument("--dry-run", action="store_true")
    install_parser.add_argument("--allow-root", action="store_true", help="root agrees to a pipeline whose service.user is root")
    args = parser.parse_args(argv)
    sys.stdout.write(json.dumps(operate(ReleaseStore(args.root), args.op, vars(args))) + "\n")
    return 0


def operate(store: ReleaseStore, op: str, options: dict) -> dict:
    """One operation of `python -m sdk service`, its answer as the command prints it (JSON); `options`: the
    operation's own flags by name, their defaults where absent. Raises TargetError for the device's own file
    system. The local target's session calls it in its own process for what needs no process of its own."""
    folder = (store.root / SERVICE_DIR).resolve()  # absolute: the supervisor runs in the release's folder
    try:
        if op == "start":
            return start(store, folder, options.get("wait", 120.0), options.get("frames"), options.get("token"))
        if op == "stop":
            return stop(folder, options.get("wait", 30.0))
        if op == "status":
            return status(folder)
        if op == "unit":
            from sdk.service.units import write_unit

            return write_unit(store, options.get("user"))
        if op == "install":
            from sdk.service.install import install

            return install(store, options.get("dry_run", False), allow_root=options.get("allow_root", False))
        return logs(folder, options.get("lines", 100))
    except OSError as exc:  # the device's own file system (a read-only or full service folder)
        raise TargetError(
            f"`service {op}` failed on the target: {exc.strerror or exc} ({exc.filename or '-'})",
            hint="the service needs its folder <root>/service writable; check the target's file system",
        ) from None
