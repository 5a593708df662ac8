"""A deploy's INT8 step with `evaluation.labels`: the chosen Q/DQ model is judged against FP32 on the labels beside
the agreement checks, and the verdict is cached with it (the real pedestrian detector, calibrated once
for the INT8 tests, on four of the example's COCO photographs, its one class `person` scored against COCO's)."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from sdk.errors import ModelError
from sdk.spec import load_pipeline
from tests.tools.int8.test_calibrate import shared_calibration
from tools.evaluate.gate import LabelGate
from tools.int8.for_deploy import Int8ForDeploy
from tools.models.prepare import PrepareModel

IMAGES = 4


def _linked(source, target):
    shutil.copytree(source, target, copy_function=os.link)  # the shared files stay untouched: new files go beside them


def _labelled(tmp_path_factory, tmp_path, limit: float | None):
    shared, _, _ = shared_calibration(tmp_path_factory, "minmax")
    if not (tmp_path / "p").exists():
        _linked(shared.folder, tmp_path / "p")
        _linked(shared.folder.parent / "cache", tmp_path / "cache")
        coco = json.loads((tmp_path / "p" / "assets" / "coco_cc_by" / "instances.json").read_text())
        kept = coco["images"][:IMAGES]
        ids = {i["id"] for i in kept}
        labels = {**coco, "images": kept, "annotations": [a for a in coco["annotations"] if a["image_id"] in ids]}
        (tmp_path / "p" / "labels.json").write_text(json.dumps(labels))
    text = shared.path.read_text() + "\nevaluation:\n  labels: labels.json\n  images: assets/coco_cc_by/images\n"
    if limit is not None:
        text = text.replace("  holdout_frames:", f"  accuracy: {{max_map_drop: {limit}}}\n  holdout_frames:", 1)
    (tmp_path / "p" / f"labelled-{limit}.yaml").write_text(text)
    pipeline = load_pipeline(tmp_path / "p" / f"labelled-{limit}.yaml")
    return pipeline, PrepareModel(pipeline, tmp_path / "cache")()


def test_the_int8_step_judges_the_qdq_model_on_the_labels_beside_the_agreement_and_refuses_a_drop(tmp_path_factory, tmp_path):
    pipeline, model = _labelled(tmp_path_factory, tmp_path, 0.5)
    with pytest.raises(ModelError, match="evaluation.labels is set, but this INT8 step was given no gate on labels"):
        Int8ForDeploy(pipeline, model, tmp_path / "cache")()  # never judged without the labels it names
    step = Int8ForDeploy(pipeline, model, tmp_path / "cache", label_gate=LabelGate.of)
    choice = step()
    labels = choice.accuracy["labels"]
    assert labels["images"] == IMAGES and labels["map50_95_fp32"] > 0.05 and labels["max_map_drop"] == 0.5
    assert abs(labels["drop"] - (labels["map50_95_fp32"] - labels["map50_95"])) < 1e-5
    assert labels["drop_interval"][0] <= labels["drop"] <= labels["drop_upper_bound"] <= labels["drop_interval"][1] < 0.5
    assert labels["status"] == "PASS" and choice.accuracy["passed"] and "recall" in choice.accuracy  # the agreement beside it
    assert json.loads((step.judged_folder / "accuracy.json").read_text())["report"]["labels"] == labels  # cached with its verdict
    # The default, one point: these four images lose about three (measured 0.140 -> 0.112) with 4 calibration frames.
    pipeline, model = _labelled(tmp_path_factory, tmp_path, None)
    strict = Int8ForDeploy(pipeline, model, tmp_path / "cache", label_gate=LabelGate.of)
    refused = r"INT8 fails the accuracy gate .*mAP@\[.5:.95\] on labels: FP32 0\.\d+, INT8 .* above the allowed drop 0.01"
    with pytest.raises(ModelError, match=refused):
        strict()
    assert strict.judged_folder != step.judged_folder  # the limit is part of the verdict's key
