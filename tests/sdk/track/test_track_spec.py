"""Bad `track:` settings: one error line naming the file's line, the YAML path, the value and what is allowed, and a hint."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sdk.errors import ConfigError
from sdk.spec import load_pipeline
from sdk.spec.track import Track

REPO = Path(__file__).resolve().parents[3]
EXAMPLE_TEXT = (REPO / "pipelines" / "pedestrian.yaml").read_text()
ANCHOR = "\nsinks:\n"


@pytest.fixture()
def folder(tmp_path: Path) -> Path:
    (tmp_path / "assets").mkdir()
    for name in ("vtest.avi", "ssdlite_pedestrian.onnx"):
        (tmp_path / "assets" / name).write_bytes(b"stand-in: the loader only checks that files exist")
    return tmp_path


def with_track(block: str) -> str:
    assert ANCHOR in EXAMPLE_TEXT
    return EXAMPLE_TEXT.replace(ANCHOR, f"\ntrack:\n{block}\n{ANCHOR}", 1)


def failure(folder: Path, text: str) -> ConfigError:
    path = folder / "p.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_pipeline(path)
    return info.value


def line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


# (track block, the line's marker, YAML path, the value as shown, what is allowed)
BAD = {
    "high-score-above-1": ("  high_score: 1.5", "high_score", "track.high_score", "1.5", "a number above 0 and at most 1"),
    "low-score-negative": ("  low_score: -0.1", "low_score", "track.low_score", "-0.1", "a number from 0 to 1"),
    "match-iou-zero": ("  match_iou: 0", "match_iou", "track.match_iou", "0", "a number above 0 and at most 1"),
    "lost-frames-text": ("  max_lost_frames: many", "max_lost_frames", "track.max_lost_frames", "'many'", "an integer from 0 to 10000"),
    "lost-frames-fraction": ("  max_lost_frames: 2.5", "max_lost_frames", "track.max_lost_frames", "2.5", "an integer from 0 to 10000"),
    "min-hits-zero": ("  min_hits: 0", "min_hits", "track.min_hits", "0", "an integer from 1 to 100"),
    "min-hits-boolean": ("  min_hits: true", "min_hits", "track.min_hits", "true", "an integer from 1 to 100"),
    "unknown-kind": ("  kind: deepsort", "deepsort", "track.kind", "deepsort", "bytetrack"),
    "low-above-high": ("  high_score: 0.4\n  low_score: 0.45", "low_score", "track.low_score", "0.45", "a number from 0 to 0.4"),
    "new-below-high": ("  new_track_score: 0.3", "new_track_score", "track.new_track_score", "0.3", "a number from 0.5 to 1"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_track_setting_is_one_line_naming_the_path_the_value_and_what_is_allowed(folder, case):
    block, marker, yaml_path, value, allowed = BAD[case]
    text = with_track(block)
    error = failure(folder, text)
    assert "\n" not in error.message and error.hint and "\n" not in error.hint
    assert f"p.yaml:{line_of(text, marker)}: {yaml_path}: " in error.message, error.message
    assert value in error.message, error.message
    assert allowed in error.message, error.message


def test_an_unknown_track_key_gets_did_you_mean(folder):
    error = failure(folder, with_track("  max_lost_frame: 10"))
    assert "track.max_lost_frame" in error.message and "max_lost_frames" in error.message + (error.hint or "")


def test_track_takes_bytetracks_own_defaults_and_is_absent_unless_asked(folder):
    path = folder / "p.yaml"
    path.write_text(EXAMPLE_TEXT)
    assert load_pipeline(path).spec.track is None
    path.write_text(with_track("  kind: bytetrack"))
    track = load_pipeline(path).spec.track
    # track_thresh 0.5, det_thresh = track_thresh + 0.1, match_thresh 0.8 (a cost: IoU 0.2), second association 0.5,
    # track_buffer 30, confirmed on the second hit (ByteTrack's BYTETracker and its demo arguments).
    assert track == Track(high_score=0.5, low_score=0.1, new_track_score=0.6, match_iou=0.2, low_match_iou=0.5, max_lost_frames=30, min_hits=2)


def test_the_cli_prints_one_error_and_one_hint_and_exits_1(folder, tmp_path):
    path = folder / "p.yaml"
    path.write_text(with_track("  min_hits: 0"))
    env = {**os.environ, "SDK_STATE_DIR": str(tmp_path / "state"), "PYTHONPATH": str(REPO), "COLUMNS": "400"}
    env.pop("SDK_DEBUG", None)
    done = subprocess.run(
        [sys.executable, "-c", "from tools.cli import main; main()", "deploy", "--target", "local", str(path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1, done.stderr
    assert len(lines) == 2 and lines[0].startswith("error: ") and "track.min_hits" in lines[0] and lines[1].startswith("hint: "), done.stderr


def test_a_tracker_without_scipy_is_one_error_naming_it(monkeypatch):
    from sdk.track import create_tracker

    monkeypatch.setitem(sys.modules, "scipy.optimize", None)  # as on a device whose release did not bring scipy
    with pytest.raises(ConfigError) as info:
        create_tracker(Track())
    assert "scipy" in info.value.message and "\n" not in info.value.message and "pip install scipy" in info.value.hint
