"""Through the real host CLI: a hostile pipeline file is one `error:` line and one `hint:` line, exit 1, and nothing else happens."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
EXAMPLE_TEXT = (REPO / "pipelines" / "pedestrian.yaml").read_text()
BOMB = "version: 1\na: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 9)}]\n" for i in range(8)
)

CASES = {
    "frames-1e30": (
        EXAMPLE_TEXT.replace("    rate_fps: 30 ", "    frames: 1e30\n    rate_fps: 30 ", 1),
        "source.replay.frames: 1e30 frames would take",
    ),
    "threads-true": (
        EXAMPLE_TEXT.replace("threads: 2", "threads: true", 1),
        "model.threads: true is a boolean, not an integer; allowed: an integer from 1 to 256",
    ),
    "two-sinks-one-path": (
        EXAMPLE_TEXT.replace("{kind: video, path: annotated.mp4}", "{kind: jsonl, path: detections.jsonl}", 1),
        "sinks[1].path: 'detections.jsonl' is also the path of sinks[0] (jsonl, 'detections.jsonl'); allowed: a path of its own",
    ),
    "sink-on-report-json": (
        EXAMPLE_TEXT.replace("{kind: jsonl, path: detections.jsonl}", "{kind: jsonl, path: report.json}", 1),
        "sinks[0].path: 'report.json' is one of the run's own files; allowed: any name but report.json",
    ),
    "alias-bomb": (BOMB, "YAML nodes (after expanding aliases)"),
    "deep-nesting": ("version: 1\nname: " + "[" * 10_000 + "]" * 10_000 + "\n", "nesting deeper than 64 levels"),
}


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_deploy_refuses_the_file_before_anything_is_created_or_sent(tmp_path, case):
    text, expected = CASES[case]
    folder = tmp_path / "pipeline"
    (folder / "assets").mkdir(parents=True)
    for name in ("vtest.avi", "ssdlite_pedestrian.onnx"):
        (folder / "assets" / name).write_bytes(b"stand-in")
    bad = folder / "bad.yaml"
    bad.write_text(text)
    state = tmp_path / "state"
    env = {**os.environ, "SDK_STATE_DIR": str(state), "PYTHONPATH": str(REPO), "COLUMNS": "400"}
    env.pop("SDK_DEBUG", None)
    done = subprocess.run(
        [sys.executable, "-c", "from tools.cli import main; main()", "deploy", "--target", "local", str(bad)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stderr
    lines = done.stderr.splitlines()
    assert [line.split(":")[0] for line in lines] == ["error", "hint"], done.stderr
    assert "Traceback" not in done.stderr and "RecursionError" not in done.stderr
    assert str(bad) in lines[0] and expected in lines[0], lines[0]
    assert not (state / "targets").exists()
    assert not state.exists() or not any(state.rglob("*"))  # no cache, no local target, nothing staged
    assert [p.name for p in tmp_path.iterdir() if p.name != "state"] == ["pipeline"]  # no reports/
    assert sorted(p.name for p in folder.iterdir()) == ["assets", "bad.yaml"]
