"""Run-to-run determinism and accuracy against the FP32 reference, on real runs of a real (tiny) pipeline."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from sdk.runtime import PipelineRunner
from sdk.runtime.timeline import TIMELINE_FILE, read_timeline, write_timeline
from sdk.runtime.verdict import FAIL, PASS
from sdk.spec.schema import AccuracyAcceptance, Determinism
from tools.evidence.determinism import compare_runs
from tools.evidence.reference import compare_with_reference, run_reference


@pytest.fixture()
def two_runs(tiny_pipeline, tmp_path):
    pipeline, artifacts = tiny_pipeline(frames=15)
    folders = []
    for name in ("a", "b"):
        result = PipelineRunner(pipeline, artifacts, tmp_path / name).run()
        write_timeline(result.recorder, 2, tmp_path / name)
        folders.append(tmp_path / name)
    return pipeline, artifacts, folders


def rewrite(folder, frame, change_timeline=True, **detection_change):
    """Change one frame's first detection in detections.jsonl (and its digest, as the runtime would)."""
    path = folder / "detections.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    det = lines[frame]["detections"][0]
    det["score"] = round(det["score"] + detection_change.get("score", 0.0), 4)
    det["box"] = [v + detection_change.get("shift", 0.0) for v in det["box"]]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    if change_timeline:
        data = read_timeline(folder / TIMELINE_FILE)
        data["digests"][data["frames"] == frame] += np.uint64(1)
        with (folder / TIMELINE_FILE).open("wb") as handle:
            np.savez(handle, **data)


def test_two_runs_on_the_same_replay_are_bit_identical(two_runs):
    _, _, (a, b) = two_runs
    result = compare_runs(a, b, Determinism())
    assert result.passed and result.frames_compared == 15 and result.identical_frames == 15
    assert result.check(2).status == PASS


def test_differences_fail_without_tolerance_and_pass_within_it(two_runs):
    _, _, (a, b) = two_runs
    rewrite(b, 7, score=0.002)
    exact = compare_runs(a, b, Determinism())
    assert not exact.passed and exact.differing_frames == (7,) and exact.identical_frames == 14
    assert exact.check(2).status == FAIL and "frames [7]" in exact.check(2).detail
    tolerant = compare_runs(a, b, Determinism(max_score_diff=0.005, min_iou=0.99))
    assert tolerant.passed and tolerant.max_score_diff == pytest.approx(0.002, abs=1e-4)
    rewrite(b, 9, shift=3.0)  # a 4x6 box moved 3 px: IoU far below 0.99
    assert compare_runs(a, b, Determinism(max_score_diff=0.005, min_iou=0.99)).differing_frames == (9,)


def test_reference_run_matches_the_runtime_and_misses_are_counted(two_runs, tmp_path):
    pipeline, artifacts, (a, _) = two_runs
    reference = run_reference(pipeline, artifacts, 15, tmp_path / "reference.jsonl")
    same = compare_with_reference(reference, a / "detections.jsonl", AccuracyAcceptance())
    assert (same.frames, same.recall, same.precision, same.mean_iou, same.mean_score_drift) == (15, 1.0, 1.0, 1.0, 0.0)
    assert {c.status for c in same.checks()} == {PASS}
    shutil.copy(a / "detections.jsonl", tmp_path / "run.jsonl")
    lines = [json.loads(line) for line in (tmp_path / "run.jsonl").read_text().splitlines()]
    for line in lines[:8]:
        line["detections"] = line["detections"][1:]  # the device lost its second-best detection on 8 frames
    (tmp_path / "run.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    worse = compare_with_reference(reference, tmp_path / "run.jsonl", AccuracyAcceptance(min_recall=0.95))
    assert worse.recall == pytest.approx(1 - 8 / worse.reference_detections) and worse.precision == 1.0
    assert [c.status for c in worse.checks()] == [FAIL, PASS, PASS, PASS]
