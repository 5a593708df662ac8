"""The figures beside COCO's, on hand-made cases whose values are known: recall at a fixed precision per class (and
where COCOeval's own precision table reaches that precision), recall and false positives per image at an operating
score, recall per size and per KITTI truncation/occlusion bin, and the worst images."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.tools.evaluate.test_metrics import _found, _random_case, _truth
from tools.evaluate import metrics, operating
from tools.evaluate.labelset import LabelledImage
from tools.evaluate.worst import worst_images

NAMES = {1: "car", 3: "person"}


def _hand_made():
    """Image 1: four cars and a person; image 2: nothing. Cars by score: a false positive on image 2 (0.95), hit (0.9),
    hit (0.8), false (0.7), hit (0.6), false (0.5); one car is never found. The person is found at 0.4."""
    cars = [[0, 0, 20, 20], [30, 0, 20, 20], [60, 0, 20, 20], [0, 50, 20, 20]]
    truth = _truth({1: [(1, box) for box in cars] + [(3, [50, 50, 40, 40])], 2: []})
    found = [
        _found(2, 1, [10, 10, 20, 20], 0.95),
        _found(1, 1, cars[0], 0.9),
        _found(1, 1, cars[1], 0.8),
        _found(1, 1, [80, 80, 15, 15], 0.7),
        _found(1, 1, cars[2], 0.6),
        _found(1, 1, [80, 40, 15, 15], 0.5),
        _found(1, 3, [50, 50, 40, 40], 0.4),
    ]
    return truth, found


@pytest.fixture(scope="module")
def hand_made():
    truth, found = _hand_made()
    return metrics.coco_eval(truth, found, [1, 3], [1, 2])


@pytest.mark.parametrize(
    ("precision", "car_recall", "car_score"),
    [(0.9, 0.0, None), (0.65, 0.5, 0.8), (0.6, 0.75, 0.6)],  # precisions by score: 0, 1/2, 2/3, 2/4, 3/5, 3/6
)
def test_recall_at_precision_and_the_score_it_takes_worked_out_by_hand(hand_made, precision, car_recall, car_score):
    point = operating.operating_point(hand_made, NAMES, precision, 0.65, draws=0)
    car, person = point["per_class"]
    assert (car["recall_at_precision"], car["score_at_precision"]) == (car_recall, car_score)
    assert (person["recall_at_precision"], person["score_at_precision"]) == (1.0, 0.4)


def test_recall_and_false_positives_per_image_at_the_operating_score(hand_made):
    point = operating.operating_point(hand_made, NAMES, 0.9, 0.65, draws=0)
    # From 0.65: cars hit at 0.9 and 0.8 (2 of 4), the person's 0.4 is below; false: 0.95 (image 2) and 0.7 (image 1).
    assert (point["recall"], point["fp_per_image"]) == (round(2 / 5, 6), 1.0)
    car, person = point["per_class"]
    assert (car["recall"], car["fp_per_image"], person["recall"], person["fp_per_image"]) == (0.5, 1.0, 0.0, 0.0)
    assert point["bins"] == [
        {"attribute": "size", "bin": "small (under 32²)", "labels": 4, "recall": 0.5, "interval": None},
        {"attribute": "size", "bin": "medium (32² to 96²)", "labels": 1, "recall": 0.0, "interval": None},
    ]


@pytest.mark.parametrize("seed", [1, 2])
def test_recall_at_precision_is_where_cocoevals_own_precision_table_reaches_it(seed):
    truth, found = _random_case(seed)
    evaluation = metrics.coco_eval(truth, found, [1, 3], [i["id"] for i in truth["images"]])
    thresholds = np.asarray(evaluation.params.recThrs)
    for precision in (0.5, 0.8, 0.9):
        point = operating.operating_point(evaluation, NAMES, precision, 0.5, draws=0)
        for k, entry in enumerate(point["per_class"]):
            table = evaluation.eval["precision"][0, :, k, 0, -1]
            reached = thresholds[table >= precision]
            expected = None if entry["recall_at_precision"] == 0 else thresholds[thresholds <= entry["recall_at_precision"] + 1e-9].max()
            assert (reached.max() if reached.size else None) == expected


def test_each_figure_has_an_interval_over_the_same_draws_that_holds_it():
    truth, found = _random_case(3)
    evaluation = metrics.coco_eval(truth, found, [1, 3], [i["id"] for i in truth["images"]])
    point = operating.operating_point(evaluation, NAMES, 0.5, 0.3, draws=200)
    assert point == operating.operating_point(evaluation, NAMES, 0.5, 0.3, draws=200)  # a fixed seed
    for value, interval in [(point["recall"], point["recall_interval"]), (point["fp_per_image"], point["fp_per_image_interval"])]:
        assert interval[0] <= value <= interval[1] and interval[0] < interval[1]
    for entry in point["per_class"]:
        low, high = entry["recall_at_precision_interval"]
        assert low <= entry["recall_at_precision"] <= high
        assert low <= entry["recall_at_precision_lower"] <= entry["recall_at_precision"]  # one-sided 95 %: the budgets' bound


def test_kitti_truncation_and_occlusion_bins():
    truth = _truth({1: [(1, [0, 0, 40, 40]), (1, [50, 0, 40, 40]), (1, [0, 50, 40, 40])]})
    for annotation, (truncated, occluded) in zip(truth["annotations"], [(0.0, 0), (0.2, 2), (0.6, 2)], strict=True):
        annotation |= {"truncated": truncated, "occluded": occluded}
    evaluation = metrics.coco_eval(truth, [_found(1, 1, [0, 0, 40, 40], 0.9), _found(1, 1, [50, 0, 40, 40], 0.2)], [1], [1])
    bins = {(b["attribute"], b["bin"]): (b["labels"], b["recall"]) for b in operating.operating_point(evaluation, NAMES, 0.9, 0.5, 0)["bins"]}
    assert bins == {
        ("size", "medium (32² to 96²)"): (3, round(1 / 3, 6)),
        ("truncated", "0 to 0.15"): (1, 1.0),
        ("truncated", "0.15 to 0.3"): (1, 0.0),  # found, but at 0.2: under the operating score
        ("truncated", "above 0.5"): (1, 0.0),
        ("occluded", "0 fully visible"): (1, 1.0),
        ("occluded", "2 largely occluded"): (2, 0.0),
        ("difficulty", "easy"): (1, 1.0),  # 40 px high, fully visible, not truncated
        ("difficulty", "moderate"): (1, 1.0),  # the second label is largely occluded: hard, not moderate
        ("difficulty", "hard"): (2, 0.5),  # the third is truncated beyond 0.5: in no level
    }


def test_kitti_difficulty_levels_follow_the_devkits_height_occlusion_and_truncation_limits():
    """KITTI's easy / moderate / hard (its object devkit: at least 40 / 25 / 25 px high, occlusion at most 0 / 1 / 2,
    truncation at most 0.15 / 0.3 / 0.5), cumulative: each label sits exactly at or just past one limit."""
    cases = [  # (height, truncated, occluded) -> the levels it counts in
        ((40, 0.15, 0), {"easy", "moderate", "hard"}),
        ((39, 0.0, 0), {"moderate", "hard"}),  # under easy's 40 px
        ((40, 0.16, 0), {"moderate", "hard"}),  # truncated past easy's 0.15
        ((25, 0.3, 1), {"moderate", "hard"}),
        ((24, 0.0, 0), set()),  # under 25 px: in no level
        ((30, 0.31, 1), {"hard"}),
        ((30, 0.5, 2), {"hard"}),
        ((30, 0.51, 2), set()),
        ((60, 0.0, 3), set()),  # occlusion unknown
    ]
    found = operating.Found(
        image=np.zeros(len(cases), int), category=np.zeros(len(cases), int), score=np.full(len(cases), 0.9),
        labels=[{"area": 40.0 * h, "bbox": [0, 0, 40, h], "truncated": t, "occluded": o} for (h, t, o), _ in cases],
    )
    levels = {name: mask for attribute, name, mask in operating.bins(found) if attribute == "difficulty"}
    for k, (_, expected) in enumerate(cases):
        assert {name for name, mask in levels.items() if mask[k]} == expected, cases[k]


def test_the_worst_images_list_their_missed_labels_and_false_positives(hand_made):
    images = [LabelledImage(1, Path("a.png"), 100, 100), LabelledImage(2, Path("b.png"), 100, 100)]
    worst = worst_images(hand_made, images, NAMES, 0.65, 5)
    assert [(w["image"], w["missed"], w["false_positives"], w["drawing"]) for w in worst] == [
        ("a.png", 3, 1, "worst/01-a.jpg"),  # two cars and the person missed (the person at 0.4), one false positive
        ("b.png", 0, 1, "worst/02-b.jpg"),
    ]
    assert sorted(label["found"] for label in worst[0]["labels"]) == [False, False, False, True, True]
    assert [(d["score"], d["hit"]) for d in worst[0]["detections"]] == [(0.9, True), (0.8, True), (0.7, False)]
