"""The example's pipeline on three of its labelled images, with `evaluation.labels`, made once for these tests."""

from __future__ import annotations

import json
import shutil
from types import SimpleNamespace

import pytest
import yaml

from tests.conftest import REPO

EXAMPLE = REPO / "pipelines" / "yolox_nano.yaml"
COCO = REPO / "pipelines" / "assets" / "coco_cc_by"
IMAGES = 3


@pytest.fixture(scope="session")
def labelled_example(tmp_path_factory) -> SimpleNamespace:
    """folder (pipeline.yaml, yolox_nano.onnx, images/, instances.json), the labels' data, the loaded pipeline and its
    prepared model (paths stay in the pipeline's folder, so the model is copied). The model is prepared into the
    session's host cache (keyed by its content): a deploy of this pipeline in the session finds it there."""
    from sdk.spec import load_pipeline
    from tools.models.prepare import PrepareModel
    from tools.state import cache_dir

    folder = tmp_path_factory.mktemp("labelled")
    (folder / "images").mkdir()
    data = json.loads((COCO / "instances.json").read_text())
    kept = data["images"][:IMAGES]
    ids = {i["id"] for i in kept}
    for image in kept:
        shutil.copy(COCO / "images" / image["file_name"], folder / "images" / image["file_name"])
    data = {**data, "images": kept, "annotations": [a for a in data["annotations"] if a["image_id"] in ids]}
    (folder / "instances.json").write_text(json.dumps(data))
    shutil.copy(REPO / "pipelines" / "assets" / "yolox_nano.onnx", folder / "yolox_nano.onnx")
    spec = yaml.safe_load(EXAMPLE.read_text())
    spec["source"]["uri"] = "images://images"
    spec["model"]["path"] = "yolox_nano.onnx"
    spec["evaluation"]["labels"] = "instances.json"
    (folder / "pipeline.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    pipeline = load_pipeline(folder / "pipeline.yaml")
    return SimpleNamespace(folder=folder, data=data, pipeline=pipeline, artifacts=PrepareModel(pipeline, cache_dir())())
