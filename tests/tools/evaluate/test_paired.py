"""Two evaluations of the same labelled images: the per-image matches kept in label_matches.npz give COCOeval's own
figures back, and the paired bootstrap's difference is B - A with an interval narrower than two separate ones."""

from __future__ import annotations

import contextlib
import io
import json

import numpy as np
import pytest

from sdk.errors import ConfigError
from tools.evaluate import metrics
from tools.history.label_matches import from_evaluation, paired_difference, read_matches, why_unpaired, write_matches

IMAGES = 16
CATEGORIES = [1, 3]


def _truth() -> dict:
    rng = np.random.default_rng(7)
    annotations = []
    for image in range(1, IMAGES + 1):
        for _ in range(int(rng.integers(2, 5))):
            x, y = (float(v) for v in rng.uniform(0, 60, 2))
            w, h = (float(v) for v in rng.uniform(15, 38, 2))
            annotations.append(
                {
                    "id": len(annotations) + 1,
                    "image_id": image,
                    "category_id": int(rng.choice(CATEGORIES)),
                    "bbox": [x, y, w, h],
                    "area": w * h,
                    "iscrowd": 0,
                }
            )
    return {
        "images": [{"id": i, "width": 100, "height": 100} for i in range(1, IMAGES + 1)],
        "categories": [{"id": 1, "name": "car"}, {"id": 3, "name": "person"}],
        "annotations": annotations,
    }


def _found(truth: dict, jitter: float, seed: int, shift: float = 0.0) -> list[dict]:
    """Each label found with its box shifted by up to `jitter` of its size (and by `shift` of it to the right), and one
    false positive an image."""
    rng = np.random.default_rng(seed)
    found = []
    for a in truth["annotations"]:
        x, y, w, h = a["bbox"]
        dx, dy = rng.uniform(-jitter, jitter, 2) * (w, h)
        found.append(
            {
                "image_id": a["image_id"],
                "category_id": a["category_id"],
                "bbox": [x + dx + shift * w, y + dy, w, h],
                "score": float(rng.uniform(0.3, 1)),
            }
        )
    for image in range(1, IMAGES + 1):
        found.append({"image_id": image, "category_id": 1, "bbox": [80.0, 80.0, 15.0, 15.0], "score": float(rng.uniform(0.2, 0.9))})
    return found


def _evaluated(truth: dict, found: list[dict], draws: int = 300):
    scored = metrics.evaluate(truth, found, CATEGORIES, list(range(1, IMAGES + 1)), draws=draws)
    return scored, from_evaluation(scored.matches, range(1, IMAGES + 1), CATEGORIES, truth)


@pytest.fixture(scope="module")
def pair():
    truth = _truth()
    return truth, _evaluated(truth, _found(truth, 0.04, 1)), _evaluated(truth, _found(truth, 0.04, 1, shift=0.08))


def test_the_stored_matches_give_cocoevals_figures_back(pair, tmp_path):
    _, (scored, matches), _ = pair
    again = read_matches(write_matches(matches, tmp_path))
    assert again.labels_sha256 == matches.labels_sha256
    assert again.figures() == pytest.approx([scored.stats["map50_95"], scored.stats["map50"]], abs=1e-6)


def test_the_same_detections_placed_worse_are_a_paired_difference_whose_interval_excludes_zero(pair):
    _, (good, a), (worse, b) = pair
    found = paired_difference(a, b, draws=400)
    figure = found["map50_95"]
    assert figure.difference == pytest.approx(worse.stats["map50_95"] - good.stats["map50_95"], abs=1e-6)
    low, high = figure.interval
    assert low <= figure.difference <= high < 0
    # Paired: narrower than the two evaluations' own intervals put together (what unpaired runs would allow).
    separate = (good.intervals["map50_95"][1] - good.intervals["map50_95"][0]) + (worse.intervals["map50_95"][1] - worse.intervals["map50_95"][0])
    assert high - low < 0.6 * separate


def test_an_evaluation_against_itself_differs_by_exactly_zero(pair):
    _, (_, a), _ = pair
    figure = paired_difference(a, a, draws=200)["map50"]
    assert figure.difference == 0.0 and figure.interval == (0.0, 0.0)


def test_evaluations_of_other_images_or_labels_are_not_paired(pair):
    truth, (_, a), _ = pair
    fewer = metrics.evaluate(truth, _found(truth, 0.04, 1), CATEGORIES, list(range(1, IMAGES)), draws=0)
    other = from_evaluation(fewer.matches, range(1, IMAGES), CATEGORIES, truth)
    assert "different labelled images" in why_unpaired(a, other)
    with pytest.raises(ConfigError, match="cannot pair the evaluations"):
        paired_difference(a, other, draws=10)


def test_a_damaged_matches_file_is_one_error_naming_it(tmp_path):
    bad = tmp_path / "label_matches.npz"
    bad.write_bytes(b"not a zip")
    with pytest.raises(ConfigError, match="label_matches.npz: not an evaluation's per-image matches"):
        read_matches(bad)


def _folder(root, name: str, matches) -> str:
    folder = root / name
    folder.mkdir()
    report = {"kind": "evaluation", "pipeline": "p", "target": "local", "verdict": "PASS", "checks": [], "notes": []}
    (folder / "report.json").write_text(json.dumps(report))
    write_matches(matches, folder)
    return str(folder)


def _compare(*args: str) -> tuple[int, str]:
    from tools.cli import run

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = run(["compare", *args])
    return code, out.getvalue()


def test_sdk_compare_of_two_evaluations_says_the_worse_map_and_fails_on_it(pair, tmp_path):
    _, (_, a), (_, b) = pair
    first, second = _folder(tmp_path, "a", a), _folder(tmp_path, "b", b)
    code, out = _compare(first, second, "--json", "--fail-on-worse")
    result = json.loads(out)
    rows = {f["name"]: f for f in result["figures"]}
    assert code == 3 and "accuracy.map50_95" in result["summary"]["worse"]
    assert rows["accuracy.map50_95"]["tested"] and rows["accuracy.map50_95"]["interval"][1] < 0
    assert any("paired bootstrap over the same 16 labelled images" in n for n in result["notes"])
    code, out = _compare(first, first, "--json", "--fail-on-worse")
    assert code == 0 and {f["name"]: f["verdict"] for f in json.loads(out)["figures"]}["accuracy.map50_95"] == "same"
