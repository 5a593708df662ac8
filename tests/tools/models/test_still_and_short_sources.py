"""A still image and a short clip as a newcomer gives them to `sdk init`: the file loops them, its budgets say where
they come from, the printed next step deploys as written, and `sdk check` and a run say when a source holds fewer
frames than the health check or `--frames` ask for. The first test goes through the real CLI processes (`sdk init`,
`sdk check`, `sdk-deploy`, text read back); the others call the same CLI in this process (the words, exit codes and
files are their subject, not the process boundary, and each fresh interpreter costs 2-3 CPU-seconds of imports)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest
import yaml

from tests.tools.models.test_init_pipeline import in_process, yolo_v8_like

REPO = Path(__file__).resolve().parents[3]


def run(tmp_path: Path, *args: str, main: str = "main") -> subprocess.CompletedProcess:
    env = {**os.environ, "SDK_STATE_DIR": str(tmp_path / ".state"), "PYTHONPATH": str(REPO), "COLUMNS": "200"}
    argv = [sys.executable, "-c", f"from tools.cli import {main}; {main}()", *args]
    return subprocess.run(argv, cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300)


@pytest.fixture()
def cli(capfd, monkeypatch):
    """`run` above, in this process (tools.cli.run, the CLI's own error boundary): the same argv, cwd and environment."""

    def call(tmp_path: Path, *args: str, main: str = "main"):
        argv = ["deploy", *args] if main == "deploy_main" else list(args)
        return in_process(capfd, monkeypatch, argv, tmp_path, {"SDK_STATE_DIR": str(tmp_path / ".state"), "COLUMNS": "200"})

    return call


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """A tiny YOLOv8-shaped model beside a photo and a 6-frame clip."""
    tmp = tmp_path_factory.mktemp("still")
    yolo_v8_like(tmp / "plates.onnx")
    rng = np.random.default_rng(1)
    cv2.imwrite(str(tmp / "photo.jpg"), rng.integers(0, 255, (96, 128, 3), np.uint8))
    writer = cv2.VideoWriter(str(tmp / "short.avi"), cv2.VideoWriter_fourcc(*"MJPG"), 10.0, (128, 96))
    for _ in range(6):
        writer.write(rng.integers(0, 255, (96, 128, 3), np.uint8))
    writer.release()
    return tmp


def test_a_still_image_loops_and_the_printed_next_step_deploys_as_written(folder):
    done = run(folder, "init", "plates.onnx", "--source", "file://photo.jpg")
    assert done.returncode == 0, done.stderr
    assert "source: a still image, played in a loop" in done.stdout
    text = (folder / "plates.yaml").read_text()
    assert "A still image has no frame rate: a 30 fps camera's budgets" in text and "25 fps" not in text
    assert yaml.safe_load(text)["source"]["replay"] == {"loop": True}
    checked = run(folder, "check", "plates.yaml")
    assert checked.returncode == 0 and "problem" not in checked.stdout, checked.stdout
    step = next(line for line in done.stdout.splitlines() if line.startswith("next: ")).split(", then ")[1]
    argv = shlex.split(step)
    assert argv[:3] == ["deploy", "--target", "local"] and argv[-2] == "--frames"
    argv[-1] = "12"  # the printed 309 frames, fewer: the loop is what the health check's 5 and any run past 1 frame need
    deployed = run(folder, *argv[1:], "--report-dir", "reports", main="deploy_main")
    assert deployed.returncode in (0, 3, 4), deployed.stdout + deployed.stderr  # judged, not an error (12 frames back no p99)
    assert "health check on local: 5/5" in deployed.stderr
    assert len((folder / "reports" / "detections.jsonl").read_text().splitlines()) == 12


def test_check_finds_a_still_without_its_loop_and_a_clip_shorter_than_asked(folder, cli):
    assert cli(folder, "init", "plates.onnx", "--source", "file://photo.jpg", "--output", "base.yaml").returncode == 0
    data = yaml.safe_load((folder / "base.yaml").read_text())
    data["source"] = {"uri": "file://photo.jpg"}
    (folder / "noloop.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    done = cli(folder, "check", "noloop.yaml")
    assert done.returncode == 1
    assert (
        "problem  source: file://photo.jpg holds 1 frame (a still image), fewer than the 5 the health check needs (health.min_frames)"
        in done.stdout
    ), done.stdout
    assert "hint: play it in a loop (source.replay: {loop: true})" in done.stdout
    data["source"] = {"uri": "file://short.avi"}
    data["health"] = {"min_frames": 3}
    (folder / "short.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    done = cli(folder, "check", "short.yaml", "--frames", "20")
    warned = "warn     source: file://short.avi holds 6 frames, fewer than the 20 asked for (--frames): the run ends after 6"
    assert warned in done.stdout, done.stdout
    assert "health check needs" not in done.stdout


def test_a_run_past_a_short_clips_end_says_so(folder, cli):
    done = cli(folder, "init", "plates.onnx", "--source", "file://short.avi", "--output", "clip.yaml")
    assert "source: 6 frame(s), fewer than the 309 a backed p99 needs: played in a loop (source.replay.loop)" in done.stdout, done.stdout
    data = yaml.safe_load((folder / "clip.yaml").read_text())
    assert data["source"]["replay"] == {"loop": True}
    data["source"] = {"uri": "file://short.avi"}  # played once: the run ends with the clip, and says so
    (folder / "once.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    ran = cli(folder, "--target", "local", "once.yaml", "--frames", "9", "--report-dir", "once", main="deploy_main")
    said = "file://short.avi: the source ended after 6 frame(s), before the 9 asked (--frames or replay.frames)"
    assert said in ran.stdout, ran.stdout + ran.stderr


def test_the_host_counts_a_synthetic_source_as_the_reader_delivers_it(tmp_path):
    from sdk.sources.synthetic import SyntheticReader
    from sdk.sources.uri import parse_source_uri
    from tools.models.source_facts import source_facts
    from tools.validation.pipeline_check import _source_frames

    delivered = SyntheticReader(parse_source_uri("synthetic://boxes")).frames
    assert source_facts("synthetic://boxes", tmp_path).frames == delivered
    assert _source_frames(None, "camera", "synthetic://boxes") == delivered


def test_the_host_counts_every_image_an_images_source_reads(tmp_path):
    from tools.models.source_facts import source_facts

    (tmp_path / "frames").mkdir()
    for name, channels in (("a.png", 3), ("b.ppm", 3), ("c.pgm", 1), ("d.webp", 3)):
        assert cv2.imwrite(str(tmp_path / "frames" / name), np.zeros((6, 8, channels), np.uint8).squeeze())
    assert source_facts("images://frames", tmp_path).frames == 4
