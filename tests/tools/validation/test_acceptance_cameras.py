"""Accuracy acceptance of a several-camera INT8 deploy, judged per camera against the host's FP32 reference:
an underexposed rear camera fails by name while the aggregate passes; its own thresholds (`budgets.cameras.rear.accuracy`)
are what it is judged by."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from sdk.errors import ConfigError
from sdk.runtime.report import REPORT_FILE
from sdk.runtime.verdict import format_number
from sdk.spec import load_pipeline
from tests.tools.int8.test_calibrate_multicam import dark_recording, shared_dark_recording, shared_two_camera_int8, two_cameras
from tools.deploy.flow import Deploy
from tools.evidence.acceptance import accept
from tools.models.prepare import PrepareModel
from tools.state import cache_dir

STRICT = {"min_recall": 0.9, "min_precision": 0.9, "min_mean_iou": 0.5, "max_mean_score_drift": 0.1}
LOOSE = {"min_recall": 0.5, "min_precision": 0.5, "min_mean_iou": 0.5, "max_mean_score_drift": 0.2}


def int8_two_cameras(folder: Path, rear_accuracy: dict | None = None) -> Path:
    """Front: vtest.avi; rear: the same scenes underexposed (gain 0.15). INT8 with a lenient calibration gate, so the
    deploy runs and the acceptance judges; every frame kept (no pacing)."""
    rear = {"uri": dark_recording(folder / "assets" / "dark") if not (folder / "assets" / "dark").exists() else "images://assets/dark"}
    lenient = {"min_recall": 0.5, "min_precision": 0.5, "max_mean_score_drift": 0.5}
    path = two_cameras(folder, rear=rear, frames=16, holdout_frames=16, accuracy=lenient)
    doc = yaml.safe_load(path.read_text())
    doc["model"]["precision"] = "int8"
    doc["budgets"] = {"warmup_frames": 2, "end_to_end": {"p50_ms": 60000}, "accuracy": STRICT}
    if rear_accuracy is not None:
        doc["budgets"]["cameras"] = {"rear": {"accuracy": rear_accuracy}}
    for camera in doc["sources"].values():
        camera["replay"] = {"late_frames": "keep"}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def with_shared_dark_recording(tmp_path_factory, folder: Path) -> Path:
    """`folder/assets/dark`: a copy of the shared underexposed recording (the same PNGs dark_recording writes), so
    int8_two_cameras does not decode the whole clip again."""
    shutil.copytree(shared_dark_recording(tmp_path_factory), folder / "assets" / "dark")
    return folder


@pytest.mark.slow
def test_one_underexposed_camera_fails_by_name_and_its_own_thresholds_judge_it(tmp_path, tmp_path_factory, state_dir):
    # The host cache starts with the shared two-camera calibration of these very frames (content-keyed: the same
    # model, recordings and frames); the gate of this pipeline's own calibration.accuracy, the deploy and the
    # acceptance run here.
    shutil.copytree(shared_two_camera_int8(tmp_path_factory, "dark") / "cache", state_dir / "cache")
    path = int8_two_cameras(with_shared_dark_recording(tmp_path_factory, tmp_path / "p"))
    report = Deploy(path, "local", frames=10, report_dir=tmp_path / "r")().report
    status = {c["name"]: c["status"] for c in report["checks"] if "accuracy" in c["name"]}
    assert report["verdict"] == "FAIL" and status["cameras.rear.accuracy.recall"] == "FAIL"
    assert all(status[f"accuracy.{key}"] == "PASS" for key in ("recall", "precision", "mean_iou", "mean_score_drift"))  # averaged away
    assert all(value == "PASS" for name, value in status.items() if name.startswith("cameras.front."))
    cameras = report["accuracy"]["cameras"]
    assert cameras["front"]["frames"] == cameras["rear"]["frames"] == 10 and cameras["rear"]["recall"] < 0.9 <= report["accuracy"]["recall"]
    assert cameras["rear"]["thresholds"] == STRICT
    page = (tmp_path / "r" / "report.html").read_text()
    assert "<th>camera</th><th>frames</th><th>recall</th>" in page
    assert f"<td>rear</td><td>10</td><td>{format_number(cameras['rear']['recall'])}</td>" in page  # the accuracy table's row
    # The same run judged with the rear camera's own (looser) thresholds: every check passes; the front keeps budgets.accuracy.
    path = int8_two_cameras(tmp_path / "p", rear_accuracy=LOOSE)
    pipeline = load_pipeline(path)
    device = json.loads((tmp_path / "r" / REPORT_FILE).read_text())
    device["checks"] = [c for c in device["checks"] if "accuracy" not in c["name"]]
    judged = accept(tmp_path / "r", pipeline, PrepareModel(pipeline, cache_dir())(), device)
    assert all(c["status"] == "PASS" for c in judged["checks"] if "accuracy" in c["name"])
    assert judged["accuracy"]["cameras"]["rear"]["thresholds"] == LOOSE and judged["accuracy"]["cameras"]["front"]["thresholds"] == STRICT


def test_a_camera_accuracy_needs_budgets_accuracy(tmp_path, tmp_path_factory):
    path = int8_two_cameras(with_shared_dark_recording(tmp_path_factory, tmp_path / "p"), rear_accuracy=LOOSE)
    doc = yaml.safe_load(path.read_text())
    doc["budgets"].pop("accuracy")
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    with pytest.raises(ConfigError, match="cameras.rear.accuracy sets this camera's own accuracy thresholds: set budgets.accuracy too") as raised:
        load_pipeline(path)
    assert "\n" not in raised.value.message
