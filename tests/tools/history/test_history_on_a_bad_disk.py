"""The history on a disk that refuses writes, for real: in a read-only folder (a read-only bind mount) it is read, never
called damaged; on a full disk (a small tmpfs filled to its last byte) a run that cannot be recorded says "disk full"."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest


def mount(*args: str, point: Path, made: list[Path]) -> None:
    done = subprocess.run(["mount", *args, str(point)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount here: {done.stderr.strip()}")
    made.append(point)


@pytest.fixture()
def mounts():
    if os.geteuid() != 0:
        pytest.skip("a tmpfs or a read-only bind mount needs root")
    made: list[Path] = []
    yield made
    for point in reversed(made):
        subprocess.run(["umount", "-l", str(point)], check=False)


def copy_history(source: Path, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for suffix in ("", "-wal", "-shm"):
        if Path(f"{source}{suffix}").is_file():
            shutil.copyfile(f"{source}{suffix}", folder / f"history.sqlite{suffix}")
    return folder / "history.sqlite"


def test_a_history_in_a_read_only_folder_is_read_and_never_called_damaged(history_runs, sdk, mounts, tmp_path, monkeypatch):
    history = copy_history(history_runs.history, tmp_path / "kept")
    mount("--bind", str(history.parent), point=history.parent, made=mounts)
    mount("-o", "remount,bind,ro", point=history.parent, made=mounts)
    monkeypatch.setenv("SDK_HISTORY", str(history))
    listed = sdk("history", "--json")
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout)["matching"] == len(history_runs.runs)
    compared = sdk("compare", history_runs.r1, history_runs.r2, "--json")
    assert compared.returncode == 0, compared.stderr
    assert json.loads(compared.stdout)["summary"]["worse"]
    from tools.history.record import record_run

    recorded = record_run(history_runs.folder / "r1-validate-1", "validate")
    assert recorded.run_id is None and "read-only" in recorded.reason and "damaged" not in recorded.reason, recorded.reason


def test_a_run_that_cannot_be_recorded_on_a_full_disk_says_disk_full(history_runs, mounts, tmp_path, monkeypatch):
    disk = tmp_path / "disk"
    disk.mkdir()
    mount("-t", "tmpfs", "-o", "size=4m", "tmpfs", point=disk, made=mounts)
    history = copy_history(history_runs.history, disk)
    monkeypatch.setenv("SDK_HISTORY", str(history))
    shutil.copytree(history_runs.folder / "r1-validate-1", tmp_path / "another-run")  # a run not in the history yet
    with (disk / "filler").open("wb", buffering=0) as handle:
        for size in (1 << 20, 1 << 12, 1):
            try:
                while True:
                    handle.write(bytes(size))
            except OSError:
                pass
    from tools.history.record import record_run

    recorded = record_run(tmp_path / "another-run", "validate")
    assert recorded.run_id is None and "disk full" in recorded.reason and "damaged" not in recorded.reason, recorded.reason
