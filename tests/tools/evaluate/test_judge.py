"""Budgets on labels: PASS on the 95 % lower bound, FAIL on the measured figure, INCONCLUSIVE between (with the images
it would take), written to report.json and junit.xml as every budget is."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from sdk.runtime.verdict import combine, describe_verdict
from sdk.spec.budgets import AccuracyBudget
from tools.evaluate import report as files
from tools.evaluate.judge import UNLABELLED, class_figures, images_needed, label_checks, unlabelled_checks

STATS = {"map50_95": 0.30, "map50": 0.45}
INTERVALS = {"map50_95": [0.24, 0.36], "map50": [0.38, 0.53]}
LOWER = {"map50_95": 0.25, "map50": 0.39}


def _check(**limits):
    (check,) = label_checks(AccuracyBudget(**limits), STATS, LOWER, INTERVALS, 29)
    return check


def test_a_minimum_under_the_lower_bound_passes():
    check = _check(map50_95=0.25)
    assert (check.name, check.status, check.measured, check.bound, check.frames) == ("accuracy.map50_95", "PASS", 0.30, 0.25, 29)


def test_a_minimum_over_the_measured_figure_fails():
    assert _check(map50=0.46).status == "FAIL"


def test_a_minimum_between_bound_and_figure_is_inconclusive_with_the_images_it_would_take():
    check = _check(map50_95=0.28)
    assert check.status == "INCONCLUSIVE"
    assert check.frames_needed == images_needed(0.30, 0.25, 0.28, 29) == 182  # 29 x (0.05 / 0.02)^2, rounded up
    assert "95% lower bound 0.2500 is not" in check.detail
    assert combine([check])[2] == [f"accuracy.map50_95: 29 image(s) measured, 182 needed for a 95% bound ({check.detail})"]


def test_no_budget_on_labels_judges_nothing():
    assert label_checks(None, STATS, LOWER, INTERVALS, 29) == []
    assert label_checks(AccuracyBudget(), STATS, LOWER, INTERVALS, 29) == []


def test_a_run_without_labels_lists_its_budgets_on_labels_as_inconclusive_and_judges_fp32_agreement_alone():
    budgets = AccuracyBudget(min_recall=0.9, map50_95=0.25)
    checks = unlabelled_checks(budgets)
    assert [(c.name, c.limit, c.measured, c.status, c.detail) for c in checks] == [("accuracy.map50_95", 0.25, None, "INCONCLUSIVE", UNLABELLED)]
    assert budgets.reference_thresholds().model_dump() == {
        "min_recall": 0.9,
        "min_precision": 0.95,
        "min_mean_iou": 0.9,
        "max_mean_score_drift": 0.05,
    }
    assert unlabelled_checks(None) == [] and unlabelled_checks(AccuracyBudget()) == []
    assert combine(checks)[2] == [f"accuracy.map50_95: {UNLABELLED}"]


CLASSES = ("person", "car", "bicycle", "truck")
TO_CATEGORY = {0: 1, 1: 3, 2: 2, 3: 8}  # the class map: model class index -> category id
PER_CLASS = [  # the per-class rows as operating.py fills them (recall at the evaluation's precision, 0.9 here)
    {"category_id": 1, "recall_at_precision": 0.86, "recall_at_precision_lower": 0.82, "recall_at_precision_interval": [0.81, 0.9]},
    {"category_id": 3, "recall_at_precision": 0.74, "recall_at_precision_lower": 0.67, "recall_at_precision_interval": [0.65, 0.83]},
    {"category_id": 2, "recall_at_precision": 0.5, "recall_at_precision_lower": 0.3, "recall_at_precision_interval": [0.28, 0.7]},
]  # no row for truck: no label of its category among the scored images


def test_a_per_class_recall_at_precision_is_judged_on_its_own_bound():
    budgets = AccuracyBudget(map50_95=0.25, min_recall_at_precision={"person": 0.8, "car": 0.7, "bicycle": 0.6, "truck": 0.5})
    stats, lower, intervals = class_figures(budgets, CLASSES, TO_CATEGORY, PER_CLASS)
    checks = label_checks(budgets, STATS | stats, LOWER | lower, INTERVALS | intervals, 29, precision=0.9)
    got = [(c.name, c.status, c.measured, c.bound, c.frames_needed) for c in checks]
    assert got == [
        ("accuracy.map50_95", "PASS", 0.30, 0.25, None),
        ("accuracy.min_recall_at_precision.person", "PASS", 0.86, 0.82, None),  # lower bound 0.82 >= 0.8
        ("accuracy.min_recall_at_precision.car", "INCONCLUSIVE", 0.74, 0.67, 89),  # 29 x (0.07 / 0.04)^2 = 88.8, up
        ("accuracy.min_recall_at_precision.bicycle", "FAIL", 0.5, 0.3, None),  # measured under the minimum
        ("accuracy.min_recall_at_precision.truck", "INCONCLUSIVE", None, None, None),
    ]
    assert checks[2].frames_needed == images_needed(0.74, 0.67, 0.7, 29)
    assert "recall of class 'car' at precision 0.9 (IoU 0.5); 95% interval 0.6500 to 0.8300 over 29 images" in checks[2].detail
    assert checks[4].detail == "recall of class 'truck' at precision 0.9 (IoU 0.5); no label of its category among the scored images"
    verdict, _, notes = combine(checks)
    assert verdict == "FAIL" and any(n.startswith("accuracy.min_recall_at_precision.car: 29 image(s) measured, 89 needed") for n in notes)
    per_class = [f"accuracy.min_recall_at_precision.{n}" for n in ("person", "car", "bicycle", "truck")]
    assert [c.name for c in unlabelled_checks(budgets)][1:] == per_class


@pytest.fixture()
def written(tmp_path):
    checks = label_checks(AccuracyBudget(map50_95=0.25, map50=0.5), STATS, LOWER, INTERVALS, 29)
    verdict, checks, notes = combine(checks)
    dicts = [c.as_dict() for c in checks]
    report = {
        "kind": "evaluation", "pipeline": "yolox_nano", "target": "local", "verdict": verdict, "verdict_detail": describe_verdict(verdict, dicts),
        "checks": dicts, "notes": notes, "map50_95": 0.30, "map50": 0.45, "intervals": INTERVALS, "lower_bounds": LOWER,
        "metrics": dict.fromkeys(("map75", "map_small", "map_medium", "map_large", "ar100"), 0.1) | STATS, "per_class": [], "curves": {},
        "labels": {"path": "instances.json", "format": "coco", "images": 29, "images_scored": 29, "labels": 337}, "evaluator": "pycocotools",
        "backend": "onnxruntime", "wall_s": 3.0,
    }  # fmt: skip
    files.write(report, tmp_path)
    return tmp_path


def test_the_budgets_appear_in_report_json_and_junit_xml(written):
    report = json.loads((written / "report.json").read_text())
    assert report["verdict"] == "FAIL" and [(c["name"], c["status"]) for c in report["checks"]] == [
        ("accuracy.map50_95", "PASS"),
        ("accuracy.map50", "FAIL"),
    ]
    cases = {case.get("name"): case for case in ET.parse(written / "junit.xml").getroot().iter("testcase")}
    assert set(cases) == {"accuracy.map50_95", "accuracy.map50"}
    assert cases["accuracy.map50_95"].find("failure") is None
    failure = cases["accuracy.map50"].find("failure")
    assert failure.get("type") == "Fail" and "measured 0.45, limit 0.5, over 29 image(s)" in failure.get("message")
    assert (written / "report.html").read_text().count("accuracy.map50") == 2
