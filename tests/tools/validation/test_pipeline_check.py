"""`sdk check PIPELINE [--target T] [--frames N]`: a pipeline file checked without a run, on the files `sdk init` writes
for real models (Megvii's YOLOX-Nano, MediaPipe's BlazeFace): schema and placeholders, the decoder against the
prepared model's real tensors, the frames against the budgets, and what this host sees of a target."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from tests.integration.test_blazeface_real_model import ASSETS, one_box_and_one_score_tensor
from tests.tools.connect.test_check_target import example_copied
from tests.tools.models.test_init_pipeline import REPO, in_process


@pytest.fixture()
def sdk(capfd, monkeypatch, tmp_path):
    def call(*args: str, env: dict | None = None):
        return in_process(capfd, monkeypatch, list(args), tmp_path, {"COLUMNS": "400", "SDK_STATE_DIR": str(tmp_path / ".state"), **(env or {})})

    return call


def lines(done) -> dict[str, str]:
    """`  problem  budgets: ...` -> {"budgets": "problem"} (the last status of each)."""
    found = {}
    for line in done.stdout.splitlines():
        parts = line.split(None, 1)
        if len(parts) == 2 and parts[0] in ("ok", "note", "warn", "problem") and ":" in parts[1]:
            found[parts[1].split(":", 1)[0]] = parts[0]
    return found


@pytest.fixture()
def yolox(tmp_path, sdk) -> Path:
    shutil.copy(ASSETS / "yolox_nano.onnx", tmp_path / "yolox_nano.onnx")
    shutil.copy(REPO / "pipelines" / "assets" / "vtest.avi", tmp_path / "clip.avi")
    assert sdk("init", "yolox_nano.onnx", "--source", "file://clip.avi").returncode == 0
    return tmp_path / "yolox_nano.yaml"


def change(path: Path, **keys) -> None:
    data = yaml.safe_load(path.read_text())
    for dotted, value in keys.items():
        node, parts = data, dotted.split("__")
        for part in parts[:-1]:
            node = node[part]
        if value is None:
            node.pop(parts[-1])
        else:
            node[parts[-1]] = value
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def test_the_file_init_writes_for_yolox_checks_clean(yolox, sdk):
    done = sdk("check", yolox.name)
    assert done.returncode == 0, done.stdout + done.stderr
    assert lines(done) == {"pipeline file": "ok", "model": "ok", "preprocess": "ok", "decoder": "ok", "source": "note", "budgets": "ok"}
    assert "output [1, 3549, 85] float32" in done.stdout and "decoder: YOLO yolox, 3549 candidates" in done.stdout
    assert "file://clip.avi: 795 frames" in done.stdout and "end_to_end.p99_ms needs 309 with the warm-up" in done.stdout
    assert done.stdout.strip().splitlines()[-1] == "nothing found that stops yolox_nano.yaml from running and being judged"


def test_too_few_frames_for_a_p99_budget_is_a_problem_naming_how_many(yolox, sdk):
    done = sdk("check", yolox.name, "--frames", "100")
    assert done.returncode == 1 and lines(done)["budgets"] == "problem", done.stdout
    assert "end_to_end.p99_ms: 90 measured frames (100 less 10 warm-up) cannot back a PASS at 95 % (end_to_end.p99_ms needs 299)" in done.stdout
    assert "hint: run at least 309 frames" in done.stdout and done.stdout.strip().endswith("1 problem(s): budgets")


def test_classes_that_do_not_match_the_model_are_a_problem_before_any_run(yolox, sdk):
    change(yolox, postprocess__classes=["person", "car"])
    done = sdk("check", yolox.name)
    assert done.returncode == 1 and lines(done)["model and decoder"] == "problem", done.stdout
    assert "postprocess.classes names 2 class(es) but 'output' (yolox layout, shape [1, 3549, 85]) scores 80" in done.stdout


def test_no_budgets_is_a_warning_not_a_problem(yolox, sdk):
    change(yolox, budgets=None)
    done = sdk("check", yolox.name)
    assert done.returncode == 0 and lines(done)["budgets"] == "warn" and "a run is INCONCLUSIVE (exit 4)" in done.stdout


def test_a_placeholder_left_is_a_problem_of_the_file(tmp_path, sdk):
    one_box_and_one_score_tensor(ASSETS / "blazeface_front_128.onnx", tmp_path / "faces.onnx")
    assert sdk("init", "faces.onnx").returncode == 0
    done = sdk("check", "faces.yaml")
    assert done.returncode == 1 and lines(done) == {"pipeline file": "problem"}, done.stdout
    assert "preprocess.normalize: still the placeholder `sdk init` wrote" in done.stdout


def test_with_a_target_what_this_host_sees_of_it_is_checked(yolox, sdk, tmp_path):
    env = {k: v for k, v in example_copied(tmp_path / "t").items() if k in ("HOME", "SDK_TARGETS_DIR")}
    done = sdk("check", yolox.name, "--target", "orin-01", env=env)
    assert done.returncode == 1 and {k: lines(done)[k] for k in ("target", "key file", "host key pin")} == {
        "target": "ok",
        "key file": "problem",
        "host key pin": "problem",
    }, done.stdout
    assert "(not contacted)" in done.stdout and "hint: create it (ssh-keygen -t ed25519" in done.stdout
    done = sdk("check", yolox.name, "--target", "orin-02", env=env)
    assert done.returncode == 1 and lines(done)["target"] == "problem" and "unknown target 'orin-02'" in done.stdout
