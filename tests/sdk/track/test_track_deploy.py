"""`deploy --target local` of a pipeline with `track:`: the release runs the tracker after NMS and detections.jsonl
carries track_id, track_age and track_state; the release's offline wheels bring scipy only with `track:`."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from sdk.spec import load_pipeline
from tools.cli import run
from tools.release.wheels import pipeline_modules, requirements_for

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "pipelines" / "pedestrian.yaml"
RELAXED = (
    ("end_to_end: {p50_ms: 33.3, p99_ms: 50.0, max_ms: 200.0}", "end_to_end: {p50_ms: 60000, p99_ms: 60000, max_ms: 60000}"),
    ("deadline_ms: 33.3 ", "deadline_ms: 60000 "),
    ("infer: {p99_ms: 40.0}", "infer: {p99_ms: 60000}"),
    ("\nsinks:\n", "\ntrack: {kind: bytetrack, max_lost_frames: 15}\n\nsinks:\n"),
)


def tracking_pipeline(folder: Path) -> Path:
    shutil.copytree(REPO / "pipelines" / "assets", folder / "assets")
    text = EXAMPLE.read_text()
    for old, new in RELAXED:
        assert old in text, old
        text = text.replace(old, new, 1)
    path = folder / "pedestrian.yaml"
    path.write_text(text)
    return path


@pytest.mark.slow
def test_deploy_local_with_track_writes_track_ids_in_detections_jsonl(tmp_path, capfd, monkeypatch):
    pipeline = tracking_pipeline(tmp_path / "p")
    state, reports = tmp_path / "state", tmp_path / "reports"
    for key, value in {"SDK_STATE_DIR": str(state), "SDK_TARGETS_DIR": str(tmp_path / "targets"), "COLUMNS": "200"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(REPO)
    # The CLI in this process: what is checked is the release's output, not the host process (a subprocess costs its imports).
    code = run(["deploy", "--target", "local", str(pipeline), "--frames", "40", "--report-dir", str(reports)])
    done = SimpleNamespace(returncode=code, stderr=capfd.readouterr().err)
    assert done.returncode in (0, 4), done.stderr  # 30 measured frames back no p99: INCONCLUSIVE, never an error
    report = json.loads((reports / "report.json").read_text())
    assert set(report["stages"]) == {"preprocess", "infer", "postprocess", "sink"}  # the tracker is timed with postprocess
    lines = [json.loads(line) for line in (reports / "detections.jsonl").read_text().splitlines()]
    assert [line["frame"] for line in lines] == list(range(40))
    people = [d for line in lines for d in line["detections"]]
    assert people and all({"track_id", "track_age", "track_state"} <= set(d) for d in people)
    assert all(d["track_state"] in ("tracked", "tentative", "untracked") for d in people)
    assert all((d["track_id"] is None) == (d["track_state"] != "tracked") for d in people)
    tracked = [d for d in people if d["track_state"] == "tracked"]
    assert len(tracked) > len(people) // 2  # the people of the clip walk on: most detections belong to a confirmed track
    ids_by_frame = [[d["track_id"] for d in line["detections"] if d["track_id"] is not None] for line in lines]
    assert all(len(ids) == len(set(ids)) for ids in ids_by_frame)
    # An id seen on consecutive frames ages one frame a frame.
    last = {}
    for index, line in enumerate(lines):
        for d in line["detections"]:
            if d["track_id"] is not None:
                if d["track_id"] in last:
                    assert d["track_age"] - last[d["track_id"]][1] == index - last[d["track_id"]][0]
                last[d["track_id"]] = (index, d["track_age"])
    assert max(age for _, age in last.values()) >= 30  # someone was followed through most of the run


def test_without_track_the_jsonl_has_no_track_keys(tmp_path):
    from sdk.frame import Frame
    from sdk.postprocess.detections import Detections
    from sdk.sinks.jsonl import JsonlSink

    detections = Detections(2, ("person",))
    detections.boxes[0] = (1, 2, 3, 4)
    detections.scores[0] = 0.9
    detections.count = 1
    frame = Frame(index=0, t_capture_ns=5, image=None)
    plain = json.loads(JsonlSink(tmp_path / "d.jsonl").line(frame, detections))
    assert set(plain["detections"][0]) == {"label", "score", "box"}
    detections.tracked = True
    detections.track_ids[0], detections.track_ages[0], detections.track_states[0] = 7, 3, 0
    tracked = json.loads(JsonlSink(tmp_path / "d.jsonl").line(frame, detections))
    assert tracked["detections"][0] == {**plain["detections"][0], "track_id": 7, "track_age": 3, "track_state": "tracked"}


def test_scipy_travels_in_the_offline_wheels_only_with_a_tracking_pipeline(tmp_path):
    tracking = load_pipeline(tracking_pipeline(tmp_path / "p"))
    plain = load_pipeline(EXAMPLE)
    assert pipeline_modules(tracking.spec) == ("scipy",) and pipeline_modules(plain.spec) == ()
    missing = ["onnxruntime", "scipy"]  # what a JetPack device's probe reports (JetPack has numpy and cv2, no scipy)
    assert requirements_for(missing, needs=pipeline_modules(tracking.spec)) == ["onnxruntime>=1.17", "scipy>=1.10"]
    assert requirements_for(missing, needs=pipeline_modules(plain.spec)) == ["onnxruntime>=1.17"]


def test_the_bundle_of_a_tracking_pipeline_asks_for_scipy(tmp_path, prepared_example):
    from tools.release.bundle import collect_bundle

    tracking = load_pipeline(tracking_pipeline(tmp_path / "p"))
    assert collect_bundle(tracking, prepared_example, "key").modules == ("scipy",)
    assert collect_bundle(load_pipeline(EXAMPLE), prepared_example, "key").modules == ()


def test_the_probe_reports_scipy_like_a_runtime_module():
    from sdk.probe import PIPELINE_MODULES, _missing_modules

    assert "scipy" in PIPELINE_MODULES
    assert "scipy" not in _missing_modules()  # this Python has it (the test extra)
