"""The metrics: pycocotools' figures on hand-made cases whose AP is known by hand, and the bootstrap's accumulation of
COCOeval's own per-image matches, which with every image drawn once is COCOeval's figure exactly."""

from __future__ import annotations

import numpy as np
import pytest

from tools.evaluate import metrics

RECALL_POINTS = 101  # COCO's recall thresholds 0, 0.01, ..., 1


def _truth(boxes: dict[int, list[tuple[int, list[float]]]], crowd: dict[int, list[tuple[int, list[float]]]] | None = None) -> dict:
    """Ground truth: image id -> [(category id, [x, y, w, h])] on 100 x 100 images; `crowd`: crowd regions alike."""
    annotations = []
    for regions, is_crowd in ((boxes, 0), (crowd or {}, 1)):
        for image, labels in regions.items():
            for category, box in labels:
                annotations.append(
                    {
                        "id": len(annotations) + 1,
                        "image_id": image,
                        "category_id": category,
                        "bbox": box,
                        "area": box[2] * box[3],
                        "iscrowd": is_crowd,
                    }
                )
    images = sorted(set(boxes) | set(crowd or {}))
    return {
        "images": [{"id": i, "width": 100, "height": 100} for i in images],
        "categories": [{"id": 1, "name": "car"}, {"id": 3, "name": "person"}],
        "annotations": annotations,
    }


def _found(image: int, category: int, box: list[float], score: float) -> dict:
    return {"image_id": image, "category_id": category, "bbox": box, "score": score}


def test_perfect_detections_score_one_and_nothing_scores_zero():
    truth = _truth({1: [(1, [10, 10, 40, 40]), (3, [60, 60, 30, 30])], 2: [(1, [5, 5, 50, 20])]})
    perfect = [_found(a["image_id"], a["category_id"], a["bbox"], 0.9) for a in truth["annotations"]]
    assert metrics.evaluate(truth, perfect, [1, 3], [1, 2], draws=0).stats["map50_95"] == pytest.approx(1.0)
    assert metrics.evaluate(truth, [], [1, 3], [1, 2], draws=0).stats["map50_95"] == 0.0


def test_a_false_positive_between_two_hits_gives_the_ap_worked_out_by_hand():
    # Two cars; detections by score: hit, miss, hit. Precision 1 up to recall 0.5 (51 of COCO's 101 recall points),
    # then 2/3 up to recall 1 (50 points): AP = (51 + 50 * 2/3) / 101 at every IoU threshold (the hits are exact).
    truth = _truth({1: [(1, [10, 10, 30, 30]), (1, [60, 10, 30, 30])]})
    found = [_found(1, 1, [10, 10, 30, 30], 0.9), _found(1, 1, [10, 60, 30, 30], 0.8), _found(1, 1, [60, 10, 30, 30], 0.7)]
    result = metrics.evaluate(truth, found, [1], [1], draws=0)
    expected = (51 + 50 * 2 / 3) / RECALL_POINTS
    assert result.stats["map50_95"] == pytest.approx(expected, abs=1e-6)
    assert result.stats["map50"] == pytest.approx(expected, abs=1e-6)
    assert result.per_class[0] | {"ap50_95": pytest.approx(expected, abs=1e-6)} == {
        "category_id": 1, "name": "car", "labels": 2, "detections": 3, "ap50_95": pytest.approx(expected, abs=1e-6), "ap50": round(expected, 6),
    }  # fmt: skip


def test_a_box_shifted_to_iou_0_6_counts_at_the_lower_iou_thresholds_only():
    # IoU 0.6 passes thresholds 0.50, 0.55 and 0.60 (3 of 10): mAP@[.5:.95] = 0.3, AP50 = 1.
    truth = _truth({1: [(3, [0, 0, 40, 40])]})
    shift = 40 - 40 * 2 * 0.6 / 1.6  # IoU of two 40 x 40 boxes shifted by s along x: (40 - s) / (40 + s) = 0.6
    result = metrics.evaluate(truth, [_found(1, 3, [shift, 0, 40, 40], 0.8)], [3], [1], draws=0)
    assert result.stats["map50"] == pytest.approx(1.0)
    assert result.stats["map50_95"] == pytest.approx(0.3)


def test_a_detection_on_a_crowd_region_is_neither_hit_nor_miss():
    truth = _truth({1: [(3, [0, 0, 20, 20])]}, crowd={1: [(3, [50, 50, 50, 50])]})
    found = [_found(1, 3, [0, 0, 20, 20], 0.9), _found(1, 3, [55, 55, 20, 20], 0.95)]  # the second lies in the crowd
    assert metrics.evaluate(truth, found, [3], [1], draws=0).stats["map50_95"] == pytest.approx(1.0)


def _random_case(seed: int) -> tuple[dict, list[dict]]:
    rng = np.random.default_rng(seed)
    labels = {}
    for image in range(1, 16):
        labels[image] = [
            (int(rng.choice([1, 3])), [float(v) for v in [*rng.uniform(0, 50, 2), *rng.uniform(5, 45, 2)]]) for _ in range(rng.integers(0, 6))
        ]
    truth = _truth(labels, crowd={3: [(1, [60, 60, 35, 35])]})
    found = []
    for a in truth["annotations"]:
        if rng.random() < 0.75:
            x, y, w, h = a["bbox"]
            jitter = rng.normal(0, 0.1, 4) * [w, h, w, h]
            found.append(_found(a["image_id"], a["category_id"], [x + jitter[0], y + jitter[1], w + jitter[2], h + jitter[3]], float(rng.random())))
    for _ in range(40):
        found.append(
            _found(int(rng.integers(1, 16)), int(rng.choice([1, 3])), [*rng.uniform(0, 60, 2).tolist(), 20.0, 20.0], float(rng.random() * 0.6))
        )
    return truth, found


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_accumulating_the_per_image_matches_once_each_is_cocoevals_figure(seed):
    truth, found = _random_case(seed)
    evaluation = metrics.coco_eval(truth, found, [1, 3], [i["id"] for i in truth["images"]])
    ones = np.ones((1, len(truth["images"])), np.int64)
    ours = metrics.accumulate(metrics.image_matches(evaluation), ones, np.asarray(evaluation.params.recThrs))[0]
    assert ours == pytest.approx(evaluation.stats[:2], abs=1e-12)


def test_an_image_drawn_twice_counts_as_its_copy_would():
    truth, found = _random_case(4)
    images = [i["id"] for i in truth["images"]]
    copy = max(images) + 1  # image 2 again, under a new id: what a draw with image 2 twice must score
    twice = {
        "images": [*truth["images"], {"id": copy, "width": 100, "height": 100}],
        "categories": truth["categories"],
        "annotations": truth["annotations"] + [a | {"id": 1000 + a["id"], "image_id": copy} for a in truth["annotations"] if a["image_id"] == 2],
    }
    found_twice = found + [d | {"image_id": copy} for d in found if d["image_id"] == 2]
    expected = metrics.coco_eval(twice, found_twice, [1, 3], [*images, copy]).stats[:2]
    evaluation = metrics.coco_eval(truth, found, [1, 3], images)
    weights = np.ones((1, len(images)), np.int64)
    weights[0, images.index(2)] = 2
    ours = metrics.accumulate(metrics.image_matches(evaluation), weights, np.asarray(evaluation.params.recThrs))[0]
    assert ours == pytest.approx(expected, abs=1e-6)  # tied scores may sort the copy's detections apart: a hair's difference


def test_a_draw_scores_alone_what_it_scores_among_others_and_one_without_a_category_leaves_it_out():
    """accumulate() works out only the draws that hold a label of a category: each draw's figures are its own, whatever
    the other draws in its chunk hold, and a draw with no label of a category scores the categories it has."""
    truth, found = _random_case(5)
    evaluation = metrics.coco_eval(truth, found, [1, 3], [i["id"] for i in truth["images"]])
    matches, thresholds = metrics.image_matches(evaluation), np.asarray(evaluation.params.recThrs)
    holding = [{int(i) for i in np.flatnonzero(m["labels"])} for m in matches]
    assert holding[0] and holding[1] and holding[0] != holding[1]
    only = sorted(holding[1] - holding[0])[:1] or sorted(holding[1])[:1]  # a draw of one image: no label of category 1 if it can
    weights = np.ones((4, len(truth["images"])), np.int64)
    weights[1] = 0
    weights[1, only] = 3
    weights[2, sorted(holding[0])[0]] = 0
    weights[3] = np.arange(len(truth["images"])) % 3
    together = metrics.accumulate(matches, weights, thresholds)
    for row in range(len(weights)):
        assert np.array_equal(together[row], metrics.accumulate(matches, weights[row : row + 1], thresholds)[0], equal_nan=True), row
    if not set(only) & holding[0]:
        alone = [dict(m) for m in matches]
        alone[0] = {**matches[0], "image": matches[0]["image"][:0], "tp": matches[0]["tp"][:, :0], "fp": matches[0]["fp"][:, :0]}
        alone[0]["labels"] = np.zeros_like(matches[0]["labels"])  # category 1 gone: the draw's figure is category 3's alone
        assert np.array_equal(together[1], metrics.accumulate(alone, weights[1:2], thresholds)[0], equal_nan=True)


def test_the_intervals_hold_the_figure_and_repeat_exactly():
    truth, found = _random_case(5)
    images = [i["id"] for i in truth["images"]]
    first = metrics.evaluate(truth, found, [1, 3], images, draws=300)
    second = metrics.evaluate(truth, found, [1, 3], images, draws=300)
    assert first.intervals == second.intervals and first.lower_bounds == second.lower_bounds  # a fixed seed
    for name in ("map50_95", "map50"):
        low, high = first.intervals[name]
        assert low < first.stats[name] < high
        assert low <= first.lower_bounds[name] <= first.stats[name]
