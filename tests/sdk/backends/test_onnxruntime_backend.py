"""The ONNX Runtime backend: named tensors, buffers bound once, results equal to a plain session."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, save

from sdk.backends import create_backend
from sdk.errors import ConfigError, ModelError


def small_model(path, shape=(1, 3, 8, 8)):
    graph = helper.make_graph(
        [
            helper.make_node("Mul", ["x", "two"], ["doubled"]),
            helper.make_node("ReduceSum", ["doubled"], ["total"], keepdims=0),
        ],
        "small",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        [
            helper.make_tensor_value_info("doubled", TensorProto.FLOAT, list(shape)),
            helper.make_tensor_value_info("total", TensorProto.FLOAT, []),
        ],
        initializer=[helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])],
    )
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), str(path))
    return path


def test_buffers_are_bound_once_and_results_land_in_them(tmp_path):
    model = small_model(tmp_path / "m.onnx")
    with create_backend("auto", model, threads=1) as backend:
        assert [s.describe() for s in backend.input_specs] == ["x [1, 3, 8, 8] float32"]
        assert [s.name for s in backend.output_specs] == ["doubled", "total"]
        x, doubled, total = backend.inputs["x"], backend.outputs["doubled"], backend.outputs["total"]
        for value in (1.0, 3.0):
            x[...] = value
            backend.infer()
            assert backend.inputs["x"] is x and backend.outputs["doubled"] is doubled  # same arrays every frame
            assert np.all(doubled == 2 * value) and float(total) == pytest.approx(2 * value * x.size)


def test_prepared_detector_matches_a_plain_session(prepared_example):
    rng = np.random.default_rng(0)
    with create_backend("onnxruntime", prepared_example.model_path) as backend:
        x = backend.inputs["Preprocessor/sub:0"]
        x[...] = rng.uniform(-1, 1, x.shape)
        backend.infer()
        session = ort.InferenceSession(str(prepared_example.model_path), providers=["CPUExecutionProvider"])
        expected = session.run(None, {"Preprocessor/sub:0": x})
        assert np.allclose(backend.outputs["concat:0"], expected[0], atol=1e-5)
        assert np.allclose(backend.outputs["concat_1:0"], expected[1], atol=1e-5)


def test_dynamic_shapes_are_refused_with_a_hint(detector_path):
    backend = create_backend("onnxruntime", detector_path)
    with pytest.raises(ModelError, match="dynamic shape") as info:
        backend.open()
    assert "model.prepare.inputs" in info.value.hint


def test_unreadable_model(tmp_path):
    (tmp_path / "bad.onnx").write_bytes(b"garbage")
    with pytest.raises(ModelError, match="cannot load"):
        create_backend("auto", tmp_path / "bad.onnx").open()


def test_unknown_backend():
    with pytest.raises(ConfigError, match="unknown backend 'openvino'; allowed: auto, onnxruntime, tensorrt"):
        create_backend("openvino", "x.onnx")
