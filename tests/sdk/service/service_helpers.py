"""Shared by the service fault tests: one deploy per run, a copy of its store per test, real processes
found by their command line, every one of them reaped when the test ends (pass or fail)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sdk.store.objects import ReleaseStore
from tests.conftest import PIPELINE, tiny_yolo

CAMERA = "synthetic://boxes?width=64&height=48&frames=100000"
SERVICE = """
service:
  watchdog_s: 1.0
  status_interval_s: 0.2
  stop_timeout_s: 2
  max_restarts: 3
  restart_window_s: 60
  restart_backoff_s: 0.1
"""


def deploy_once(tmp_path_factory, name: str = "svc", service: str = SERVICE) -> Path:
    """A tiny pipeline (synthetic camera, 30 fps) deployed once per run to a local target, shared by every xdist
    worker (tests copy it: copy_store); returns the store's root. Same `name`, same deploy."""
    from tests.conftest import shared_folder

    def build(base: Path) -> None:
        from tools.deploy.flow import Deploy

        folder = base / "pipeline"
        folder.mkdir()
        tiny_yolo(folder / "tiny.onnx")
        (folder / "tiny.yaml").write_text(PIPELINE.format(uri=CAMERA, rate=30, max_ms=5000) + service)
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("SDK_STATE_DIR", str(base / "state"))
            Deploy(folder / "tiny.yaml", "local", frames=3, report_dir=base / "deploy")()

    return shared_folder(tmp_path_factory, f"deployed-{name}", build) / "state" / "targets" / "local"


def copy_store(root: Path, where: Path, *edits: tuple[str, str]) -> ReleaseStore:
    """This test's own copy of the deployed store; `edits` change its committed release's pipeline file, as a
    release of its own that is committed in its place (a start runs only bytes that match a manifest)."""
    shutil.copytree(root, where, symlinks=True)
    store = ReleaseStore(where)
    if edits:
        commit_edited(store, edits)
    return store


def commit_edited(store: ReleaseStore, edits) -> str:
    """A new release: the committed one with its pipeline file edited, assembled from the store's objects and
    committed after it (what a deploy of the edited file would leave, without its trial); returns its id."""
    import dataclasses
    import hashlib

    from sdk.release import FileEntry, ReleaseManifest
    from sdk.store.activation import STATE_FILE

    before = store.committed()
    folder = store.release_dir(before)
    manifest = ReleaseManifest.load(folder)
    (name,) = (n for n in manifest.files if n.startswith("pipeline/") and n.endswith(".yaml"))
    text = (folder / name).read_text()
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new)
    data = text.encode()
    sha256 = hashlib.sha256(data).hexdigest()
    source = store.root / "edited.yaml"
    source.write_bytes(data)
    store.add_file(source, sha256)
    source.unlink()
    edited = dataclasses.replace(manifest, files={**manifest.files, name: FileEntry(sha256, len(data))})
    store.assemble(edited)
    env = store.env_dir(before)
    if env.is_dir():
        shutil.copytree(env, store.env_dir(edited.release_id), symlinks=True)
    state = store.state()
    store._write_json(STATE_FILE, {"committed": edited.release_id, "history": [*state["history"], edited.release_id]})
    store.recover()
    return edited.release_id


def processes(mark: str, word: str | None = None) -> list[int]:
    """Live (not zombie) processes whose command line holds `mark` (and the word `word`, e.g. serve)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and any(mark in part for part in argv) and (word is None or word in argv):
            found.append(int(entry.name))
    return found


def reap(mark: str) -> None:
    """SIGKILL every process of this test (by PID, found by its unique folder) and wait until they are gone."""
    deadline = time.monotonic() + 10
    while (pids := processes(mark)) and time.monotonic() < deadline:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGCONT)
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.05)
    _reap_children()


DETACHED: set[int] = set()  # supervisors an in-process `start` made this process's children


def _reap_children() -> None:
    """Collect the ended supervisors an in-process `start` detached: no zombie of theirs outlives the test."""
    for pid in list(DETACHED):
        try:
            if os.waitpid(pid, os.WNOHANG)[0] == 0:
                continue  # still running (another test's folder)
        except ChildProcessError:
            pass
        DETACHED.discard(pid)


IN_PROCESS = ("start", "status", "stop", "logs", "unit")


def service(root: Path, *args: str, check: bool = True) -> dict:
    """`python -m sdk service --root ROOT ARGS`: its JSON (check: exit 0 asserted), or with check=False its return code
    and stderr too. The root step (`install`) runs in a fresh interpreter; the others run the same entry point (the
    device's error boundary, sdk/__main__) in this process, which saves an interpreter start (about 0.5 CPU-s) a call.
    A supervisor that `start` detached is then this process's child: once ended it stays a zombie until reaped, which
    the service's own checks already tell from a live process (sdk/procinfo.py), and `reap` reaps it. Each command
    still runs as its own process in tests/sdk/service/test_service_process.py (and three concurrent starts in
    test_service_instance.py) and, over SSH, in tests/tools/targets/test_service_commands.py."""
    if args and args[0] in IN_PROCESS:
        done = _in_process(["service", "--root", str(root), *args])
        if args[0] == "start" and done.returncode == 0:
            DETACHED.add(json.loads(done.stdout)["supervisor_pid"])
        _reap_children()
    else:
        done = subprocess.run([sys.executable, "-m", "sdk", "service", "--root", str(root), *args], capture_output=True, text=True, timeout=120)
    if check:
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)
    return {"returncode": done.returncode, "stderr": done.stderr, **(json.loads(done.stdout) if done.stdout.strip() else {})}


def _in_process(argv: list[str]) -> subprocess.CompletedProcess:
    """`python -m sdk ARGV` in this process: the module's own error boundary (`sdk.__main__.main`) and exit code. It is
    called, not run by runpy: where the SDK is installed, pytest's assertion rewriter is the loader of `sdk`'s modules,
    and runpy needs a loader's `get_code`, which that one lacks."""
    import contextlib
    import io

    from sdk.__main__ import main

    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(argv)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    return subprocess.CompletedProcess(["sdk", *argv], code, out.getvalue(), err.getvalue())


def wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def mount_tmpfs(where: Path, size: str) -> None:
    """A small disk of our own at `where` (root only); the caller unmounts it (see unmount)."""
    where.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (root needed): {done.stderr.strip()}")


def unmount(where: Path) -> None:
    for _ in range(50):
        if subprocess.run(["umount", str(where)], capture_output=True).returncode == 0:
            return
        time.sleep(0.1)
    subprocess.run(["umount", "-l", str(where)], capture_output=True)


def fill(folder: Path, leave: int = 0) -> Path:
    """Fill the file system of `folder` with a file until at most `leave` bytes are free (ENOSPC when 0)."""
    path = folder / "filler"
    block = b"\xff" * 65536
    with path.open("wb", buffering=0) as handle:
        while True:
            free = shutil.disk_usage(folder).free
            if free <= leave:
                break
            try:
                handle.write(block[: max(1, min(len(block), free - leave))])
            except OSError:
                break
    return path


def jsonl_lines(output: Path) -> list[dict]:
    """Every published detection line of a service's detections.jsonl, oldest file first."""
    from sdk.sinks.files import finished_files

    lines = []
    for path in finished_files(output / "detections.jsonl"):
        data = path.read_bytes()
        assert b"\0" not in data, f"NUL bytes in {path.name}"
        lines += [json.loads(line) for line in data.decode().splitlines()]
    return lines


def relist(folder: Path) -> None:
    """Rewrite a loose release folder's manifest for the files as they are now (a test's edited copy)."""
    import dataclasses
    import hashlib

    from sdk.release import MANIFEST, FileEntry, ReleaseManifest

    manifest = ReleaseManifest.load(folder)
    files = {}
    for name in manifest.files:
        data = (folder / name).read_bytes()
        files[name] = FileEntry(hashlib.sha256(data).hexdigest(), len(data))
    (folder / MANIFEST).chmod(0o644)
    (folder / MANIFEST).write_text(dataclasses.replace(manifest, files=files).to_json())
