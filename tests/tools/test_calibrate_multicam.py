"""INT8 calibration of batched cameras is refused in one line (not done yet); with batch.size 1 it reads the first camera."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sdk.errors import ConfigError
from sdk.spec import load_pipeline
from tools.calibrate import Calibrate, source_uri

REPO = Path(__file__).resolve().parents[2]


def two_cameras(tmp_path: Path, batch: dict) -> Path:
    doc = yaml.safe_load((REPO / "pipelines" / "pedestrian.yaml").read_text())
    doc.pop("source")
    doc["sources"] = {"front": {"uri": "file://assets/vtest.avi"}, "rear": {"uri": "file://assets/tree.avi"}}
    doc["batch"] = batch
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_batched_cameras_are_refused_in_one_line(tmp_path):
    pipeline = load_pipeline(two_cameras(tmp_path, {"size": "cameras"}), check_files=False)
    with pytest.raises(ConfigError, match="INT8 calibration of 2 batched cameras is not supported yet") as raised:
        Calibrate(pipeline, None, tmp_path / "cache")
    assert "\n" not in raised.value.message


def test_one_frame_at_a_time_calibrates_on_the_first_camera(tmp_path):
    pipeline = load_pipeline(two_cameras(tmp_path, {"size": 1}), check_files=False)
    assert source_uri(pipeline) == "file://assets/vtest.avi"
