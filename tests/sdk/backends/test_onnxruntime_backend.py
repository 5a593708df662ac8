"""The ONNX Runtime backend: named tensors, buffers bound once, results equal to a plain session."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper, save

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


def qdq_conv(path, channels=16, kernel=3):
    """Q/DQ Conv as `quantize_static` writes it: symmetric INT8 input, weights (scale 1/127) and output (scale 2)."""
    weights = np.full((channels, channels, kernel, kernel), 127, np.int8)
    graph = helper.make_graph(
        [
            helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
            helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
            helper.make_node("DequantizeLinear", ["wq", "s", "z"], ["wd"]),
            helper.make_node("Conv", ["xd", "wd"], ["conv"]),
            helper.make_node("QuantizeLinear", ["conv", "out_s", "z"], ["yq"]),  # the output's Q/DQ makes it an INT8 Conv
            helper.make_node("DequantizeLinear", ["yq", "out_s", "z"], ["y"]),
        ],
        "qdq_conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, channels, 6 - kernel + 1, 6 - kernel + 1])],
        initializer=[
            helper.make_tensor("s", TensorProto.FLOAT, [], [1 / 127]),
            helper.make_tensor("out_s", TensorProto.FLOAT, [], [2.0]),  # 144 is 72 steps: exact
            helper.make_tensor("z", TensorProto.INT8, [], [0]),
            numpy_helper.from_array(weights, "wq"),
        ],
    )
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), str(path))
    return path, weights.astype(np.float64) / 127


def test_int8_convolution_is_exact_on_every_x86_cpu(tmp_path):
    # Without VNNI, ONNX Runtime's default INT8 kernel sums pairs of u8 x s8 products into 16 bits,
    # which saturate at full-scale values like these (and on a real detector cost 0.02 cosine); the
    # backend asks for the exact path, as TensorRT's int32 accumulation on the device is exact.
    model, weights = qdq_conv(tmp_path / "qdq.onnx")
    x = np.ones((1, 16, 6, 6))  # quantized to 127 (255 once ONNX Runtime shifts it to u8): a product pair overflows int16
    expected = np.einsum("ncij,kcij->nk", x[:, :, :3, :3], weights)  # every window sees the same values
    with create_backend("onnxruntime", model, threads=1) as backend:
        backend.inputs["x"][...] = x
        backend.infer()
        result = backend.outputs["y"]
    assert expected[0, 0] == pytest.approx(144.0)  # 16 channels x 9 taps x 1 x 1
    np.testing.assert_allclose(result, np.broadcast_to(expected[:, :, None, None], result.shape), rtol=1e-5)


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


def test_a_session_that_does_not_spin_computes_exactly_what_the_runtime_computes(prepared_example):
    """Host-side work (the FP32 reference, the accuracy gate, the sensitivity search) runs the real detector with
    `spinning=False`: ONNX Runtime's idle threads sleep. Only the scheduling changes: on two threads, bit-identical
    outputs to the runtime's own (spinning) session; the option is set only where asked for."""
    from sdk.backends.onnxruntime_cpu import session_options

    assert session_options(2, spinning=False).get_session_config_entry("session.intra_op.allow_spinning") == "0"
    with pytest.raises(Exception, match="allow_spinning"):  # unset: ONNX Runtime's default, spinning
        session_options(2).get_session_config_entry("session.intra_op.allow_spinning")
    results = []
    for spinning in (True, False):
        with create_backend("onnxruntime", prepared_example.model_path, threads=2, spinning=spinning) as backend:
            ((name, buffer),) = backend.inputs.items()
            buffer[...] = np.random.default_rng(3).uniform(-1, 1, buffer.shape).astype(buffer.dtype)
            backend.infer()
            results.append({k: v.copy() for k, v in backend.outputs.items()})
    assert results[0].keys() == results[1].keys() and all(np.array_equal(results[0][k], results[1][k]) for k in results[0])
    assert any(np.abs(v).max() > 0 for v in results[0].values())
