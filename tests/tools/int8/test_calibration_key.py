"""The calibration's cache key covers every setting its artifacts depend on: ranges.json records the held-out
frames and the gate (its verdict cached beside the ranges) judges exactly those, so asking for other held-out
frames is a new calibration, never the old verdict on the old frames."""

from __future__ import annotations

import shutil
from pathlib import Path

from sdk.spec import load_pipeline
from tests.conftest import EXAMPLE
from tools.int8.calibrate import Calibrate


def _variant(folder: Path, name: str, old: str, new: str) -> Path:
    if not (folder / "assets").exists():
        shutil.copytree(EXAMPLE.parent / "assets", folder / "assets")
    text = EXAMPLE.read_text()
    assert old in text
    path = folder / f"{name}.yaml"
    path.write_text(text.replace(old, new))
    return path


def test_other_held_out_frames_are_another_calibration_and_the_same_settings_the_same(tmp_path, prepared_example):
    def calibration(name: str, old: str = "holdout_frames: 50", new: str = "holdout_frames: 50") -> Calibrate:
        return Calibrate(load_pipeline(_variant(tmp_path / "p", name, old, new)), prepared_example, tmp_path / "cache")

    same, again = calibration("a"), calibration("b")
    more = calibration("c", new="holdout_frames: 60")
    assert same.selection.calibration == more.selection.calibration  # the same calibration frames...
    assert set(same.selection.holdout) < set(more.selection.holdout)  # ...but the gate would judge more frames
    assert same.key == again.key
    assert more.key != same.key
    assert calibration("d", "seed: 0", "seed: 1").key != same.key
