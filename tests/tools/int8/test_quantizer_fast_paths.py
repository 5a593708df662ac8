"""ONNX Runtime's quantizer with its slow loops done the fast way (tools/int8/quantizer_fast_paths.py): the same
numbers, installed only inside the block, off where ONNX Runtime's functions are not those they were written against.
The whole Q/DQ model, byte for byte against the quantizer as it ships: tests/tools/int8/test_calibrate.py."""

from __future__ import annotations

import threading

import numpy as np
import onnx
import pytest
from onnx import TensorProto, numpy_helper
from onnxruntime.quantization import onnx_model, qdq_quantizer, quant_utils

from tools.int8 import quantizer_fast_paths
from tools.int8.quantizer_fast_paths import fast_paths


@pytest.fixture()
def model_file(tmp_path, monkeypatch):
    """A model file without FLOAT8 initializers; the fast paths on whatever this ONNX Runtime's functions' source (where
    it is not the one they were written against, write_qdq runs the quantizer as it ships)."""
    monkeypatch.setattr(quantizer_fast_paths, "active", lambda: True)
    graph = onnx.helper.make_graph([onnx.helper.make_node("Identity", ["x"], ["y"])], "g", [], [], [])
    path = tmp_path / "m.onnx"
    onnx.save(onnx.helper.make_model(graph), str(path))
    return path


def shipped():
    return (quant_utils.quantize_onnx_initializer, qdq_quantizer.find_by_name, onnx_model.ONNXModel.initializer_extend)


def test_per_channel_weights_quantize_to_the_same_integers(model_file):
    """Every channel at once gives the integers of the quantizer's channel loop: rounding halves to even, the clip at
    both ends, an all-zero channel (scale 1), on a convolution weight's axis 0 and on axis 1."""
    rng = np.random.default_rng(0)
    weight = rng.normal(0, 0.3, (6, 4, 3, 3)).astype(np.float32)
    weight[1] = 0.0
    scale = (2.0 * np.abs(weight.reshape(6, -1)).max(axis=1) / 254.0).astype(np.float32)
    scale[1] = 1.0
    weight[2, 0, 0, :3] = np.array([0.5, 1.5, -2.5], np.float32) * scale[2]  # exact halves
    scale[3] /= 4  # values past 127 scales: clipped
    cases = [(weight, scale, 0), (weight.transpose(1, 0, 2, 3).copy(), scale, 1)]
    as_shipped = quant_utils.quantize_onnx_initializer
    for data, scales, axis in cases:
        proto = numpy_helper.from_array(data, "w")
        zero = np.zeros(len(scales), np.int8)
        expected = quant_utils.quantize_onnx_initializer(proto, TensorProto.INT8, zero, scales, axis)
        with fast_paths(model_file) as on:
            assert on and quant_utils.quantize_onnx_initializer is not as_shipped
            got = quant_utils.quantize_onnx_initializer(proto, TensorProto.INT8, zero, scales, axis)
        assert got.SerializeToString() == expected.SerializeToString()
        assert numpy_helper.to_array(got).min() == -128 and numpy_helper.to_array(got).max() == 127  # the clip was reached


def test_installed_only_inside_the_blocks_also_on_two_threads(model_file):
    before = shipped()
    inside, release = threading.Event(), threading.Event()

    def other() -> None:
        with fast_paths(model_file):
            inside.set()
            release.wait(10)

    thread = threading.Thread(target=other)
    thread.start()
    assert inside.wait(10)
    with fast_paths(model_file):
        assert all(a is not b for a, b in zip(shipped(), before, strict=True))
    assert all(a is not b for a, b in zip(shipped(), before, strict=True))  # the other thread's block is still open
    release.set()
    thread.join(10)
    assert shipped() == before  # the last block out put back what ONNX Runtime ships


def test_off_where_onnx_runtime_changed_them_or_the_model_holds_float8(tmp_path, monkeypatch):
    before = shipped()
    float8 = onnx.helper.make_graph([], "g", [], [], [onnx.helper.make_tensor("f", TensorProto.FLOAT8E4M3FN, [1], [1.0])])
    onnx.save(onnx.helper.make_model(float8), str(tmp_path / "f8.onnx"))
    plain = onnx.helper.make_graph([], "g", [], [], [onnx.helper.make_tensor("f", TensorProto.FLOAT, [1], [1.0])])
    onnx.save(onnx.helper.make_model(plain), str(tmp_path / "plain.onnx"))
    monkeypatch.setattr(quantizer_fast_paths, "active", lambda: True)
    with fast_paths(tmp_path / "f8.onnx") as on:  # the quantizer checks each such initializer on every addition
        assert not on and shipped() == before
    monkeypatch.undo()
    real = quantizer_fast_paths.active
    real.cache_clear()
    monkeypatch.setitem(quantizer_fast_paths.VERIFIED_SOURCES, "quant_utils.find_by_name", "0" * 64)  # another release's
    try:
        with fast_paths(tmp_path / "plain.onnx") as on:
            assert not on and shipped() == before
    finally:
        real.cache_clear()
