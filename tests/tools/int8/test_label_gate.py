"""A deploy's INT8 step with `evaluation.labels`: the chosen Q/DQ model is judged against FP32 on the labels beside
the agreement checks, and the verdict's cache is keyed by the labels (the real pedestrian detector, calibrated once
for the INT8 tests, on the example's COCO photographs, its one class `person` scored against COCO's)."""

from __future__ import annotations

import json
import os
import shutil

from sdk.spec import load_pipeline
from tests.tools.int8.test_calibrate import shared_calibration
from tools.int8.for_deploy import Int8ForDeploy
from tools.models.prepare import PrepareModel


def _linked(source, target):
    shutil.copytree(source, target, copy_function=os.link)  # the shared files stay untouched: new files go beside them


def test_the_int8_step_judges_the_qdq_model_on_the_labels_beside_the_agreement(tmp_path_factory, tmp_path):
    shared, _, calibrated = shared_calibration(tmp_path_factory, "minmax")
    root = shared.folder.parent
    _linked(shared.folder, tmp_path / "p")
    _linked(root / "cache", tmp_path / "cache")
    text = shared.path.read_text() + "\nevaluation:\n  labels: assets/coco_cc_by/instances.json\n"
    (tmp_path / "p" / "labelled.yaml").write_text(text)
    pipeline = load_pipeline(tmp_path / "p" / "labelled.yaml")
    model = PrepareModel(pipeline, tmp_path / "cache")()
    step = Int8ForDeploy(pipeline, model, tmp_path / "cache")
    choice = step()
    labels = choice.accuracy["labels"]
    assert labels["images"] == 29 and labels["map50_95_fp32"] > 0.05 and labels["max_map_drop"] == 0.01
    assert abs(labels["drop"] - (labels["map50_95_fp32"] - labels["map50_95"])) < 1e-5
    assert labels["drop_interval"][0] <= labels["drop"] <= labels["drop_upper_bound"] <= labels["drop_interval"][1]
    assert labels["status"] == ("FAIL" if labels["drop"] > 0.01 else "PASS" if labels["drop_upper_bound"] <= 0.01 else "INCONCLUSIVE")
    assert choice.accuracy["passed"] and "recall" in choice.accuracy  # the agreement checks beside it
    # The verdict on labels is cached apart from the verdict without them: another judged folder.
    plain = Int8ForDeploy(load_pipeline(tmp_path / "p" / shared.path.name), model, tmp_path / "cache")
    plain()
    assert plain.judged_folder != step.judged_folder and "labels" not in json.loads((plain.judged_folder / "accuracy.json").read_text())["report"]
