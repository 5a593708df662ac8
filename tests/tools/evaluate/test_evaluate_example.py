"""`sdk evaluate` end to end on the example: YOLOX-Nano on the 29 labelled COCO images, through the deploy's stages.

Its mAP agrees with YOLOX's own evaluation written independently (tests/integration/yolox_eval_reference.py: YOLOX's
preprocessing, decoding, NMS and COCO conversion, pycocotools on the official labels file); the report holds the
figures, the operating point, the curves and the worst images drawn; bad input is one error line and a hint, before
any model runs. The label formats agree with each other in test_formats_agree.py."""

from __future__ import annotations

import contextlib
import io
import json
import xml.etree.ElementTree as ET
from types import SimpleNamespace

import cv2
import pytest

from tests.conftest import REPO
from tools.evaluate.run import Request, evaluate

EXAMPLE = REPO / "pipelines" / "yolox_nano.yaml"
LABELS = REPO / "pipelines" / "assets" / "coco_cc_by" / "instances.json"


@pytest.fixture(scope="module")
def command(tmp_path_factory) -> SimpleNamespace:
    """`sdk evaluate` of the example as a user types it, with --json and --report-dir (its default bootstrap draws)."""
    from tools.cli import run

    folder = tmp_path_factory.mktemp("evaluate")
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = run(["evaluate", str(EXAMPLE), "--labels", str(LABELS), "--json", str(folder / "result.json"), "--report-dir", str(folder / "report")])
    return SimpleNamespace(code=code, stdout=out.getvalue(), stderr=err.getvalue(), folder=folder)


@pytest.fixture(scope="module")
def example(command) -> dict:
    return json.loads((command.folder / "result.json").read_text())


def test_the_examples_map_matches_yoloxs_own_evaluation_run_independently(example):
    import onnxruntime as ort

    from tests.integration import yolox_eval_reference
    from tools.models.family_decoders import COCO_CLASSES

    # One intra-op thread: the suite's workers already fill the machine's cores, and ONNX Runtime's default threads
    # spin while they wait for each other (about 40 % more CPU for the same detections; the figures are the same).
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(REPO / "pipelines" / "assets" / "yolox_nano.onnx"), options, providers=["CPUExecutionProvider"])
    reference = yolox_eval_reference.coco_map(session, LABELS, LABELS.parent / "images", COCO_CLASSES)
    # Measured: 0.2960 / 0.4383 against YOLOX's 0.2930 / 0.4421. Left apart: the SDK clips boxes to the image, keeps
    # 100 detections an image (YOLOX's evaluator all, COCOeval then 100 per class), maps boxes by the content's own
    # scale (int(w r) / w) where YOLOX divides by r, and samples in float where OpenCV rounds to 8 bits.
    assert example["map50_95"] == pytest.approx(reference[0], abs=0.01)
    assert example["map50"] == pytest.approx(reference[1], abs=0.01)


def test_the_example_reports_every_figure_its_intervals_and_passes_its_budgets(example):
    assert example["labels"] | {"path": None, "sha256": None} == {
        "path": None, "format": "coco", "images": 29, "images_scored": 29, "labels": 337, "crowd_regions": 6, "not_decoded": [], "sha256": None,
    }  # fmt: skip
    assert len(example["labels"]["sha256"]) == 64  # the ground truth scored, for pairing two evaluations (sdk compare)
    assert set(example["metrics"]) == {
        "map50_95",
        "map50",
        "map75",
        "map_small",
        "map_medium",
        "map_large",
        "ar1",
        "ar10",
        "ar100",
        "ar_small",
        "ar_medium",
        "ar_large",
    }
    for name in ("map50_95", "map50"):
        low, high = example["intervals"][name]
        assert low < example[name] < high and high - low > 0.02  # 29 images: an interval of several points
    assert len(example["per_class"]) == 80 and sum(c["ap50_95"] is not None for c in example["per_class"]) == 50  # 50 categories have labels
    assert example["class_map"]["classes"]["motorcycle"] == {"category_id": 4, "category": "motorcycle"}
    assert [(c["name"], c["status"]) for c in example["checks"]] == [("accuracy.map50_95", "PASS"), ("accuracy.map50", "PASS")]
    assert example["evaluation"] | {"bootstrap_draws": None} == {
        "score_threshold": 0.01, "iou_threshold": 0.65, "max_detections": 100, "nms": "per_class", "classes": {}, "bootstrap_draws": None,
        "bootstrap": "images resampled with replacement", "recall_at_precision": 0.9, "operating_score": None, "worst_images": 8,
    }  # fmt: skip
    point = example["operating_point"]
    assert (point["score"], point["precision"], point["iou"]) == (0.3, 0.9, 0.5)  # the deployment's score threshold
    for low_high, value in [(point["recall_interval"], point["recall"]), (point["fp_per_image_interval"], point["fp_per_image"])]:
        assert low_high[0] < value < low_high[1]
    assert [(b["attribute"], b["labels"]) for b in point["bins"]] == [("size", 154), ("size", 108), ("size", 75)]
    assert [b["recall"] for b in point["bins"]] == sorted(b["recall"] for b in point["bins"])  # small objects are found least
    person = next(c for c in example["per_class"] if c["name"] == "person")
    assert person["recall_at_precision"] > 0 and person["score_at_precision"] >= 0.01 and person["recall_at_precision_interval"]


def test_the_command_prints_the_figures_and_writes_report_json_junit_and_the_page(command, example):
    assert command.code == 0  # PASS: both budgets on labels are met on their 95 % lower bounds
    lines = command.stdout.splitlines()
    assert lines[0].startswith("yolox_nano on 29 labelled images (coco, 337 labels), pycocotools ") and lines[0].endswith(" COCOeval (bbox)")
    low, high = example["intervals"]["map50_95"]
    assert lines[1] == f"mAP@[.5:.95] {example['map50_95']:.4f} (95% interval {low:.4f} to {high:.4f})"
    assert lines[-1] == "verdict: PASS"
    assert "detecting on 29 labelled images" in command.stderr and "report:" in command.stderr  # progress on stderr
    report = json.loads((command.folder / "report" / "report.json").read_text())
    assert report == example
    cases = [case.get("name") for case in ET.parse(command.folder / "report" / "junit.xml").getroot().iter("testcase")]
    assert cases == ["accuracy.map50_95", "accuracy.map50"]
    page = (command.folder / "report" / "report.html").read_text()
    assert "<svg" in page and "precision-recall" in page and "teddy bear" in page
    assert lines[4].startswith("at score 0.3 (IoU 0.5): recall ") and "false positives per image" in lines[4]
    worst = example["worst_images"]
    assert len(worst) == 8 and [w["missed"] + w["false_positives"] for w in worst] == sorted(
        (w["missed"] + w["false_positives"] for w in worst), reverse=True
    )
    for entry in worst:  # drawn: the image's own size, listed in the page
        drawn = cv2.imread(str(command.folder / "report" / entry["drawing"]))
        assert drawn is not None and drawn.shape[:2] == cv2.imread(entry["path"]).shape[:2] and entry["drawing"] in page
    charts = sorted(p.name for p in (command.folder / "report" / "pr").iterdir())
    assert len(charts) == 50 and "1-person.svg" in charts and "pr/1-person.svg" in page  # the classes with labels
    # Kept image by image for sdk compare (COCOeval's figures from the matches alone), and in the run history.
    from tools.history.label_matches import read_matches
    from tools.history.query import Filters, runs
    from tools.history.store import history_path, open_for_reading

    matches = read_matches(command.folder / "report" / report["matches_file"])
    assert matches.figures() == pytest.approx([example["map50_95"], example["map50"]], abs=1e-6)
    assert matches.labels_sha256 == example["labels"]["sha256"] and len(matches.image_ids) == 29
    with contextlib.closing(open_for_reading(history_path())) as connection:
        found = runs(connection, Filters(kind="evaluate"))
    recorded = [(r["kind"], r["verdict"]) for r in found if r["report_dir"] == str(command.folder / "report")]
    assert recorded == [("evaluate", "PASS")]


def test_bad_input_is_one_error_line_and_a_hint_before_anything_runs(sdk, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"images": [], "annotations": [}')
    done = sdk("evaluate", str(EXAMPLE), "--labels", str(bad))
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.splitlines() == [
        f"error: {bad}: not valid JSON: Expecting value at line 1, column 32",
        "hint: a COCO detection file is one JSON object",
    ]
    (tmp_path / "seq" / "gt").mkdir(parents=True)
    (tmp_path / "seq" / "gt" / "gt.txt").write_text("1,1,10,5,20,30,1,1,1\n")
    done = sdk("evaluate", str(EXAMPLE), "--labels", str(tmp_path / "seq" / "gt" / "gt.txt"))  # MOTChallenge labels without their frames
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.splitlines() == [
        f"error: --images {tmp_path / 'seq' / 'img1'}: no such video or folder",
        "hint: give the sequence's video (or its frame folder) with --images",
    ]
    done = sdk("evaluate", str(EXAMPLE), "--labels", str(LABELS), "--target", "orin-01")
    assert done.returncode == 1 and done.stderr.startswith("error: unknown target 'orin-01'; known targets: local")


def test_sdk_check_refuses_a_class_the_labels_have_no_category_for(sdk, tmp_path):
    data = json.loads(LABELS.read_text())
    first = data["images"][0]
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / first["file_name"]).symlink_to(LABELS.parent / "images" / first["file_name"])
    labels = tmp_path / "no-toothbrush.json"
    labels.write_text(json.dumps({"images": [first], "annotations": [], "categories": [c for c in data["categories"] if c["name"] != "toothbrush"]}))
    done = sdk("check", str(EXAMPLE), "--labels", str(labels))
    assert done.returncode == 1
    problem = [line for line in done.stdout.splitlines() if "labels:" in line]
    assert problem == [f"  problem  labels: {EXAMPLE}: model class 'toothbrush' has no category in the labels"], done.stdout
    assert "evaluation: {classes: {CLASS: CATEGORY}}, or CLASS: null to leave it out" in done.stdout
    done = sdk("check", str(EXAMPLE), "--labels", str(LABELS))
    assert (
        done.returncode == 0 and "  ok       labels: 29 images, 337 labels and 6 crowd regions (coco); every class maps to a category" in done.stdout
    )


def test_an_image_that_does_not_decode_is_left_out_with_its_labels_and_named(tmp_path):
    data = json.loads(LABELS.read_text())
    kept, broken = data["images"][:2]
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / kept["file_name"]).symlink_to(LABELS.parent / "images" / kept["file_name"])
    whole = (LABELS.parent / "images" / broken["file_name"]).read_bytes()
    (tmp_path / "images" / broken["file_name"]).write_bytes(whole[: len(whole) // 2])  # cut short, as a failed copy leaves it
    data["images"] = [kept, broken]
    data["annotations"] = [a for a in data["annotations"] if a["image_id"] in (kept["id"], broken["id"])]
    labels = tmp_path / "two.json"
    labels.write_text(json.dumps(data))
    result = evaluate(Request(EXAMPLE, labels, draws=0))
    assert result["labels"]["images"] == 2 and result["labels"]["images_scored"] == 1
    assert result["labels"]["not_decoded"] == [
        {"file": broken["file_name"], "why": f"{broken['file_name']}: truncated JPEG (no end-of-image marker after its last scan)"}
    ]
    assert f"1 image(s) did not decode and were left out with their labels: {broken['file_name']}" in result["notes"]
    alone = tmp_path / "one.json"
    alone.write_text(json.dumps(data | {"images": [kept], "annotations": [a for a in data["annotations"] if a["image_id"] == kept["id"]]}))
    assert evaluate(Request(EXAMPLE, alone, draws=0))["map50_95"] == result["map50_95"]  # scored as if it were not listed
