"""Real runs for the history tests, made once per test run and shared by the xdist workers (tests/conftest.py
shared_folder): the tests' tiny pipeline, its decoder a Python plug-in, deployed to the local target and validated,
as release R1; then the same file with a slowdown planted in its decoder (a busy wait of SLOW_MS a frame), deployed and
validated, as release R2. Every run is recorded in the folder's history.sqlite, as the commands record it."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.conftest import PIPELINE, tiny_yolo

FRAMES = 200
SLOW_MS = 3.0
DECODER = '''\
import time

import numpy as np


def decode(outputs, geometry, options):
    """The tiny model's YOLO v5 rows, after a busy wait of options["busy_ms"] (the planted slowdown)."""
    end = time.perf_counter() + float(options["busy_ms"]) / 1000.0
    while time.perf_counter() < end:
        pass
    rows = np.asarray(outputs["output0"])[0]
    cx, cy, w, h = rows[:, 0], rows[:, 1], rows[:, 2], rows[:, 3]
    scores = rows[:, 4:5] * rows[:, 5:]
    boxes = np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=1)
    return {"boxes": boxes, "scores": scores.max(axis=1), "class_ids": scores.argmax(axis=1)}
'''


def plugin_pipeline(folder: Path, busy_ms: float, frames: int = FRAMES) -> Path:
    """The tiny pipeline with its decoder as a plug-in that waits `busy_ms` a frame (a new release per value)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "plugins").mkdir(exist_ok=True)
    (folder / "plugins" / "slow.py").write_text(DECODER)
    if not (folder / "tiny.onnx").is_file():
        tiny_yolo(folder / "tiny.onnx")
    text = PIPELINE.format(uri=f"synthetic://boxes?width=64&height=48&frames={frames}", rate="null", max_ms=5000)
    decoder = f"decoder: {{kind: python, entry: 'slow:decode', path: plugins, options: {{busy_ms: {busy_ms}}}}}"
    (folder / "tiny.yaml").write_text(text.replace("decoder: {kind: yolo, output: output0, layout: v5}", decoder))
    return folder / "tiny.yaml"


class _Environment:
    """SDK_STATE_DIR and SDK_HISTORY set for a build outside the test's monkeypatch (restored afterwards)."""

    def __init__(self, **values: str) -> None:
        self.values, self.saved = values, {}

    def __enter__(self):
        for key, value in self.values.items():
            self.saved[key] = os.environ.get(key)
            os.environ[key] = value

    def __exit__(self, *exc) -> None:
        for key, value in self.saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _build_runs(folder: Path) -> None:
    from tools.deploy.flow import Deploy
    from tools.validation.validate import Validate

    pipeline = folder / "p" / "tiny.yaml"
    runs = {}
    with _Environment(SDK_STATE_DIR=str(folder / "state"), SDK_HISTORY=str(folder / "history.sqlite")):
        for release, busy in (("r1", 0.0), ("r2", SLOW_MS)):
            plugin_pipeline(folder / "p", busy)
            deployed = Deploy(pipeline, "local", frames=FRAMES, report_dir=folder / f"{release}-deploy")()
            runs[f"{release}-deploy"] = deployed.report["release"]
            for k in (1, 2):
                validated = Validate(pipeline, "local", frames=FRAMES, report_dir=folder / f"{release}-validate-{k}")()
                runs[f"{release}-validate-{k}"] = validated.report["release"]
    (folder / "runs.json").write_text(json.dumps(runs))


@pytest.fixture()
def history_runs(tmp_path_factory, tmp_path, monkeypatch):
    """The shared runs: `.folder` (report folders r1-deploy, r1-validate-1, r1-validate-2, r2-...), `.r1`, `.r2` (release
    ids), and SDK_HISTORY set to this test's own copy of their history (SDK_STATE_DIR: a copy of the host state)."""
    from tests.conftest import shared_folder

    base = shared_folder(tmp_path_factory, "history-runs", _build_runs)
    releases = json.loads((base / "runs.json").read_text())
    for suffix in ("", "-wal", "-shm"):  # a WAL database is its file and, until checkpointed, its log
        if (base / f"history.sqlite{suffix}").is_file():
            shutil.copyfile(base / f"history.sqlite{suffix}", tmp_path / f"history.sqlite{suffix}")
    monkeypatch.setenv("SDK_HISTORY", str(tmp_path / "history.sqlite"))
    return SimpleNamespace(folder=base, r1=releases["r1-deploy"], r2=releases["r2-deploy"], history=tmp_path / "history.sqlite", runs=releases)
