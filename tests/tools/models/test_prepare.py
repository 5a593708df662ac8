"""Model preparation on the real detector: the cut, static shapes, folded constants, exact anchors, the cache."""

from __future__ import annotations

import shutil
from collections import Counter

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from sdk.errors import ModelError
from sdk.spec import load_pipeline
from tools.models.prepare import PrepareModel


def test_prepared_graph_is_the_static_convolutional_core(prepared_example):
    model = onnx.load(str(prepared_example.model_path))
    ops = Counter(node.op_type for node in model.graph.node)
    assert not {"Loop", "NonMaxSuppression", "Shape", "Gather", "Cast", "Sigmoid"} & set(ops)
    assert ops["Conv"] == 88
    dims = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in (*model.graph.input, *model.graph.output)}
    assert dims == {"Preprocessor/sub:0": [1, 3, 300, 300], "concat:0": [1, 1917, 1, 4], "concat_1:0": [1, 1917, 2]}


def test_anchors_are_read_exactly_from_the_original_graph(prepared_example, detector_path, example_pipeline):
    original = onnx.load(str(detector_path))
    initializers = {i.name: numpy_helper.to_array(i) for i in original.graph.initializer}
    anchors = prepared_example.load_tensors()["Postprocessor/ExpandDims:0"]
    assert anchors.shape == (1, 1917, 4)
    assert np.array_equal(anchors, initializers["Postprocessor/ExpandDims:0"])  # bit for bit
    # The box coder scales the pipeline declares are the reciprocals the graph multiplies by.
    y, x, h, w = example_pipeline.spec.postprocess.decoder.scale_factors
    assert 1 / y == pytest.approx(float(initializers["ConstantFolding/Postprocessor/Decode/truediv_1_recip:0"]))
    assert 1 / h == pytest.approx(float(initializers["ConstantFolding/Postprocessor/Decode/truediv_3_recip:0"]))
    assert x == y and w == h


def copy_pipeline(tmp_path, example_pipeline, detector_path, text_change=None):
    folder = tmp_path / "p"
    (folder / "assets").mkdir(parents=True)
    shutil.copyfile(detector_path, folder / "assets" / "ssdlite_pedestrian.onnx")  # a symlink out would be refused
    (folder / "assets" / "vtest.avi").write_bytes(b"")
    text = example_pipeline.path.read_text()
    if text_change:
        text = text.replace(*text_change)
    (folder / "p.yaml").write_text(text)
    return load_pipeline(folder / "p.yaml")


def test_cache_key_follows_content_and_settings(tmp_path, example_pipeline, detector_path):
    cache = tmp_path / "cache"
    first = PrepareModel(copy_pipeline(tmp_path / "a", example_pipeline, detector_path), cache)
    same = PrepareModel(copy_pipeline(tmp_path / "b", example_pipeline, detector_path), cache)
    explicit = ('outputs: ["concat:0", "concat_1:0"]', 'outputs: ["concat:0", "concat_1:0"]\n    fold_constants: true')
    other = PrepareModel(copy_pipeline(tmp_path / "c", example_pipeline, detector_path, explicit), cache)
    assert other.pipeline.path.read_text().count("fold_constants: true") == 1
    changed = PrepareModel(copy_pipeline(tmp_path / "d", example_pipeline, detector_path, ('"concat_1:0"]', '"concat_1:0", "concat:0"]')), cache)
    assert first.key == same.key == other.key  # the same settings (fold_constants defaults to true)
    assert changed.key != first.key
    artifacts = first()
    stamp = artifacts.model_path.stat().st_mtime_ns
    assert same.cached and same().model_path.stat().st_mtime_ns == stamp  # reused, not rebuilt
    assert [p.name for p in (cache / "prepared").iterdir()] == [first.key]  # nothing temporary left


def test_unknown_tensor_names_are_refused(tmp_path, example_pipeline, detector_path):
    pipeline = copy_pipeline(tmp_path, example_pipeline, detector_path, ('"concat_1:0"]', '"concat_9:0"]'))
    with pytest.raises(ModelError, match="concat_9:0"):
        PrepareModel(pipeline, tmp_path / "cache")()
    assert not any((tmp_path / "cache" / "prepared").iterdir())


def test_computed_anchor_tensor_is_refused(tmp_path, example_pipeline, detector_path):
    pipeline = copy_pipeline(tmp_path, example_pipeline, detector_path, ('"Postprocessor/ExpandDims:0"', '"Postprocessor/Tile:0"'))
    with pytest.raises(ModelError, match="not a constant of the graph"):
        PrepareModel(pipeline, tmp_path / "cache")()


def test_cut_that_keeps_the_postprocessing_is_refused(tmp_path, example_pipeline, detector_path):
    pipeline = copy_pipeline(tmp_path, example_pipeline, detector_path, ('["concat:0", "concat_1:0"]', '["detection_boxes:0"]'))
    with pytest.raises(ModelError, match=r"still depend on image_tensor:0, which the cut removes"):
        PrepareModel(pipeline, tmp_path / "cache")()
