"""`python -m sdk service --root DIR (start|stop|status|logs|unit)`: the current release's service on a target.

Without systemd (containers, the simulated target, a bench board) `start` launches the
supervisor detached (its own session, so an SSH disconnect does not end it) and waits until the
runtime reports READY or fails; `stop` sends SIGTERM and waits for the bounded shutdown. With
systemd the rendered unit (service/<pipeline>.service) is what `systemctl` runs; installing it is
a one-time root step (see the README). Prints one JSON object, like `store`.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from sdk.errors import TargetError
from sdk.service.files import LOG_FILE, PID_FILE, STATUS_FILE, SUPERVISOR_FILE, read_json
from sdk.store import ReleaseStore

SERVICE_DIR = "service"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie is not alive for our purpose (its parent has not reaped it yet).
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def supervisor_pid(folder: Path) -> int | None:
    try:
        pid = int((folder / PID_FILE).read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if _alive(pid) else None


def status(folder: Path) -> dict:
    pid = supervisor_pid(folder)
    return {
        "running": pid is not None,
        "supervisor_pid": pid,
        "supervisor": read_json(folder / SUPERVISOR_FILE),
        "runtime": read_json(folder / STATUS_FILE),
    }


def start(store: ReleaseStore, folder: Path, wait_s: float, frames: int | None = None) -> dict:
    if supervisor_pid(folder) is not None:
        return {**status(folder), "started": False, "note": "already running"}
    with store.locked():
        release = store.committed_dir()  # after recovery: a trial that can no longer finish is rolled back first
    if release is None:
        raise TargetError(f"{store.root}: no release has passed its health check here (none is committed)", hint="deploy one first")
    current = release.name
    env_python = store.env_dir(current) / "bin" / "python"  # built by the deploy that activated it
    python = env_python if env_python.exists() else Path(sys.executable)
    folder.mkdir(parents=True, exist_ok=True)
    for stale in (SUPERVISOR_FILE, STATUS_FILE):
        (folder / stale).unlink(missing_ok=True)
    command = [str(python), "-B", "-m", "sdk", "supervise", "--release", str(release), "--status-dir", str(folder)]
    command += ["--frames", str(frames)] if frames else []
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}  # the release's own sdk, not the agent's
    with (folder / LOG_FILE).open("ab") as log:
        subprocess.Popen(command, cwd=release, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        state = (read_json(folder / SUPERVISOR_FILE) or {}).get("state")
        if state in ("running", "stopped"):
            return {**status(folder), "started": True}
        if state == "failed":
            break
        time.sleep(0.1)
    now = status(folder)
    detail = (now["runtime"] or {}).get("last_error") or (now["supervisor"] or {}).get("last_reason") or "no READY in time"
    raise TargetError(f"the service of release {current} did not start: {detail}", hint=f"see {folder / LOG_FILE} (sdk logs --target T)")


def stop(folder: Path, wait_s: float) -> dict:
    pid = supervisor_pid(folder)
    if pid is None:
        return {**status(folder), "stopped": False, "note": "not running"}
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.05)
    if _alive(pid):
        raise TargetError(f"the supervisor (pid {pid}) did not stop within {wait_s:g} s", hint="it keeps trying; check sdk logs --target T")
    return {**status(folder), "stopped": True}


def logs(folder: Path, lines: int) -> dict:
    try:
        text = (folder / LOG_FILE).read_text(errors="replace")
    except FileNotFoundError:
        text = ""
    return {"log": str(folder / LOG_FILE), "lines": text.splitlines()[-lines:]}


def write_unit(store: ReleaseStore, folder: Path, user: str | None) -> dict:
    """service/perception-<pipeline>.service for the committed release (rendered, not installed: that needs root)."""
    import sdk
    from sdk.runtime.cli import load_release
    from sdk.service.unit import render_unit, unit_name

    current = store.committed()
    if current is None:
        raise TargetError(f"{store.root}: no release is committed", hint="deploy one first")
    _, pipeline, _ = load_release(store.release_dir(current))
    env_python = store.env_dir(current) / "bin" / "python"
    python = str(env_python if env_python.exists() else Path(sys.executable))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / unit_name(pipeline.spec.name)
    sdk_path = str(Path(sdk.__file__).resolve().parent.parent)  # the store code that runs this (the agent on a device)
    unit = render_unit(pipeline.spec.name, pipeline.spec.service, root=str(store.root.resolve()), python=python, sdk_path=sdk_path, user=user)
    path.write_text(unit)
    return {"unit": str(path), "install": f"sudo systemctl link {path} && sudo systemctl enable --now {path.name}"}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m sdk service")
    parser.add_argument("--root", type=Path, required=True)
    ops = parser.add_subparsers(dest="op", required=True)
    start_parser = ops.add_parser("start")
    start_parser.add_argument("--wait", type=float, default=120.0)
    start_parser.add_argument("--frames", type=int, default=None)
    ops.add_parser("stop").add_argument("--wait", type=float, default=30.0)
    ops.add_parser("status")
    ops.add_parser("logs").add_argument("--lines", type=int, default=100)
    ops.add_parser("unit").add_argument("--user", default=None)
    args = parser.parse_args(argv)
    store = ReleaseStore(args.root)
    folder = store.root / SERVICE_DIR
    try:
        if args.op == "start":
            result = start(store, folder, args.wait, args.frames)
        elif args.op == "stop":
            result = stop(folder, args.wait)
        elif args.op == "status":
            result = status(folder)
        elif args.op == "unit":
            result = write_unit(store, folder, args.user)
        else:
            result = logs(folder, args.lines)
    except TargetError as exc:
        sys.stderr.write(f"error: {exc.message}\nhint: {exc.hint}\n")
        return exc.exit_code
    sys.stdout.write(json.dumps(result) + "\n")
    return 0
