"""The gate on labels of `sdk calibrate` and `sdk optimize`: a candidate model against the FP32 original on
`evaluation.labels`, its mAP drop judged on a paired interval over the images; a FAIL refuses the candidate beside the
agreement checks, an INCONCLUSIVE says how many images would settle it."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from tools.evaluate.gate import LabelGate, _images_needed
from tools.int8.accuracy import add_to_report


@pytest.fixture(scope="module")
def gate(labelled_example):
    """The gate (1 point) of the example's pipeline on three of its images."""
    found = LabelGate.of(labelled_example.pipeline, labelled_example.artifacts, 0.01)
    found.draws = 400
    return found, labelled_example.folder


def test_the_original_model_as_its_own_candidate_loses_nothing_and_passes(gate):
    found, _ = gate
    judged = found.judge(found.artifacts.model_path)
    assert judged["drop"] == 0.0 and judged["drop_interval"] == [0.0, 0.0] and judged["status"] == "PASS" and judged["failure"] is None
    assert judged["map50_95_fp32"] == judged["map50_95"] > 0.1 and judged["images"] == 3


def test_a_damaged_candidate_fails_on_labels_and_is_refused_beside_the_agreement_checks(gate):
    found, folder = gate
    model = onnx.load(str(found.artifacts.model_path))
    rng = np.random.default_rng(0)
    for weight in model.graph.initializer:
        values = numpy_helper.to_array(weight)
        if values.ndim == 4:  # every convolution's weights, 30 % noise: the boxes move and the scores drop
            noisy = values * (1 + 0.3 * rng.standard_normal(values.shape)).astype(values.dtype)
            weight.CopyFrom(numpy_helper.from_array(noisy, weight.name))
    damaged = folder / "damaged.onnx"
    onnx.save(model, str(damaged))
    judged = found.judge(damaged, name="INT8")
    assert judged["status"] == "FAIL" and judged["drop"] > 0.01
    assert judged["failure"].startswith("mAP@[.5:.95] on labels: FP32 ") and "INT8 " in judged["failure"]
    assert judged["drop_interval"][0] <= judged["drop"] <= judged["drop_interval"][1]
    agreement = {"failures": [], "passed": True, "recall": 0.97}
    report = add_to_report(agreement, judged)
    assert report["passed"] is False and report["failures"] == [judged["failure"]] and report["labels"] is judged and report["recall"] == 0.97


def test_an_inconclusive_drop_says_how_many_images_would_settle_it():
    # A drop of 0.5 points whose upper bound is 2 points: the spread (1.5) must shrink to the 0.5 left, a ninth.
    assert _images_needed(0.005, 0.02, 0.01, 29) == 29 * 9
    # max_map_drop: 0 with no drop measured: no number of images settles it
    assert _images_needed(0.0, 0.02, 0.0, 29) is None


def test_no_finite_draw_is_an_inconclusive_drop_without_an_interval_and_not_shown_as_tested(monkeypatch):
    from types import SimpleNamespace

    import tools.history.label_matches as label_matches
    from tools.history.compare_labels import LabelPairs
    from tools.history.label_matches import PairedFigure

    empty = {name: PairedFigure(name, 0.0, 0.0, 0.0, (np.nan, np.nan), np.array([])) for name in ("map50_95", "map50")}
    monkeypatch.setattr(label_matches, "paired_difference", lambda *a, **k: empty)
    gate = LabelGate(None, None, SimpleNamespace(source="labels.json"), None, 0.01)
    gate._reference = SimpleNamespace(image_ids=[1, 2])
    monkeypatch.setattr(gate, "_matches", lambda model, progress: None)
    judged = gate.judge("candidate.onnx")
    assert judged["status"] == "INCONCLUSIVE" and judged["drop_interval"] is None and judged["images_needed"] is None
    assert "no interval" in judged["detail"] and judged["failure"] is None
    (difference, tested), _ = LabelPairs(pairs=empty).differences(0.05)
    assert difference.interval is None and not tested


def test_a_video_frame_that_did_not_decode_is_left_out_of_the_gates_images(monkeypatch):
    from pathlib import Path
    from types import SimpleNamespace

    import tools.evaluate.detect as detect_module
    import tools.evaluate.metrics as metrics_module
    import tools.history.label_matches as label_matches
    from tools.evaluate.labelset import LabelledImage

    frames = [LabelledImage(n + 1, Path("seq.mp4"), 64, 48, frame=n) for n in range(3)]
    labels = SimpleNamespace(images=frames, ground_truth=lambda: {})
    monkeypatch.setattr(detect_module, "detect", lambda *a, **k: SimpleNamespace(not_decoded=[("seq.mp4#2", "cut")], detections=[]))
    monkeypatch.setattr(metrics_module, "evaluate", lambda truth, found, categories, scored, draws: SimpleNamespace(matches=None))
    monkeypatch.setattr(label_matches, "from_evaluation", lambda matches, scored, categories, truth: scored)
    gate = LabelGate(None, None, labels, SimpleNamespace(to_category={0: 1}), 0.01)
    assert gate._matches(None, None) == [1, 3]
