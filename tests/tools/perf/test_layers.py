"""FLOP and byte counts of single layers against values computed by hand (conventions: tools/perf/layers.py)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tools.perf.layers import layers_of


def model(op: str, x: tuple, y: tuple, weights: dict[str, np.ndarray] | None = None, extra_inputs=(), **attrs):
    weights = weights or {}
    node = helper.make_node(op, ["x", *weights, *extra_inputs], ["y"], **attrs)
    graph = helper.make_graph(
        [node], "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x)], [helper.make_tensor_value_info("y", TensorProto.FLOAT, y)],
        [numpy_helper.from_array(v.astype(np.float32), k) for k, v in weights.items()],
    )  # fmt: skip
    built = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    built.ir_version = 8
    return layers_of(onnx.shape_inference.infer_shapes(built)).layers[0]


def test_a_dense_convolution():
    # 1x16x32x32 -> 32 channels, 3x3, pad 1, with bias: MACs = 32*32*32 outputs x 16 inputs x 9 taps
    layer = model("Conv", (1, 16, 32, 32), (1, 32, 32, 32), {"w": np.zeros((32, 16, 3, 3)), "b": np.zeros(32)}, pads=[1, 1, 1, 1])
    assert layer.op_class == "conv" and layer.channels == (16, 32) and layer.kernel == (3, 3)
    assert layer.macs == 32 * 32 * 32 * 16 * 9 == 4_718_592
    assert layer.flops == 2 * 4_718_592 + 32 * 32 * 32  # a bias add per output element
    assert layer.weight_elements == 32 * 16 * 9 + 32
    assert layer.bytes_moved("fp32") == 4 * (4640 + 16 * 32 * 32 + 32 * 32 * 32)
    assert layer.bytes_moved("int8") == 4640 + 16 * 32 * 32 + 32 * 32 * 32
    assert layer.intensity("fp32") == pytest.approx(layer.flops / layer.bytes_moved("fp32"))


def test_a_depthwise_and_a_pointwise_convolution():
    depthwise = model("Conv", (1, 64, 20, 20), (1, 64, 10, 10), {"w": np.zeros((64, 1, 3, 3))}, group=64, pads=[1, 1, 1, 1], strides=[2, 2])
    assert depthwise.op_class == "conv_depthwise" and depthwise.strides == (2, 2)
    assert depthwise.macs == 64 * 10 * 10 * 1 * 9 and depthwise.flops == 2 * 57_600
    assert depthwise.bytes_moved("fp16") == 2 * (64 * 9 + 64 * 400 + 64 * 100)
    pointwise = model("Conv", (1, 24, 8, 8), (1, 40, 8, 8), {"w": np.zeros((40, 24, 1, 1))})
    assert pointwise.op_class == "conv_pointwise" and pointwise.macs == 40 * 64 * 24 and pointwise.flops == 2 * 61_440


def test_gemm_and_matmul():
    gemm = model("Gemm", (4, 256), (4, 100), {"w": np.zeros((100, 256)), "c": np.zeros(100)}, transB=1)
    assert gemm.op_class == "gemm" and gemm.channels == (256, 100)
    assert gemm.macs == 4 * 100 * 256 and gemm.flops == 2 * 102_400 + 400
    assert gemm.bytes_moved("fp32") == 4 * (100 * 256 + 100 + 4 * 256 + 4 * 100)
    matmul = model("MatMul", (2, 8, 64), (2, 8, 32), {"w": np.zeros((64, 32))})
    assert matmul.macs == 2 * 8 * 32 * 64 and matmul.flops == 2 * matmul.macs


def test_pooling():
    pool = model("MaxPool", (1, 8, 16, 16), (1, 8, 8, 8), kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    assert pool.op_class == "pool" and pool.macs == 0
    assert pool.flops == 8 * 8 * 8 * 9  # one compare per window element per output
    assert pool.bytes_moved("fp32") == 4 * (8 * 256 + 8 * 64)
    average = model("GlobalAveragePool", (1, 32, 7, 7), (1, 32, 1, 1))
    assert average.flops == 32 * 49 and average.bytes_moved("fp32") == 4 * (32 * 49 + 32)


def test_resize():
    scales = {"roi": np.zeros(0), "scales": np.array([1, 1, 2, 2])}
    nearest = model("Resize", (1, 4, 10, 10), (1, 4, 20, 20), scales, mode="nearest")
    assert nearest.op_class == "resize" and nearest.flops == 0
    assert nearest.bytes_moved("fp32") == 4 * (4 * 100 + 4 * 400 + 4)  # the 4 scales are read too
    linear = model("Resize", (1, 4, 10, 10), (1, 4, 20, 20), scales, mode="linear")
    assert linear.macs == 4 * 400 * 4 and linear.flops == 2 * 6_400  # bilinear: 2^2 taps per output element


def _resize(x: tuple, y: tuple, opset: int = 17, op: str = "Resize", **attrs):
    scales = numpy_helper.from_array(np.array([b / a for a, b in zip(x, y, strict=True)], np.float32), "scales")
    inputs = ["x", "scales"] if op == "Upsample" or opset < 11 else ["x", "", "scales"]  # Resize-11 and later: roi, scales
    graph = helper.make_graph([helper.make_node(op, inputs, ["y"], mode="nearest", **attrs)], "m",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, x)], [helper.make_tensor_value_info("y", TensorProto.FLOAT, y)],
                              [scales])  # fmt: skip
    built = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    built.ir_version = 8 if opset > 9 else 4
    return layers_of(built).layers[0]


def test_a_nearest_resize_knows_whether_onnx_runtime_takes_its_2x_copy():
    """ONNX Runtime's CPU Resize copies each input pixel twice (UpsampleNearest2x) for a doubling of height and width
    alone in an Upsample, a Resize of opset 10, or a Resize with asymmetric coordinates and floor rounding; any other
    nearest Resize runs its general loop (decision 1262)."""
    doubled = ((1, 8, 10, 10), (1, 8, 20, 20))
    asymmetric = {"coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}
    assert _resize(*doubled, **asymmetric).attrs == {"mode": "nearest", "nearest2x": True}
    assert not _resize(*doubled).attrs["nearest2x"]  # opset 11+'s defaults: half_pixel, round_prefer_floor
    assert not _resize(*doubled, coordinate_transformation_mode="asymmetric").attrs["nearest2x"]  # rounding not floor
    assert not _resize((1, 8, 10, 10), (1, 8, 40, 40), **asymmetric).attrs["nearest2x"]  # by 4
    assert not _resize((1, 8, 10, 10), (1, 8, 20, 10), **asymmetric).attrs["nearest2x"]  # height alone
    assert not _resize((8, 10, 10), (8, 20, 20), **asymmetric).attrs["nearest2x"]  # not 4-D
    assert _resize(*doubled, opset=10).attrs["nearest2x"]  # Resize-10 has no coordinate modes: always the copy
    assert _resize(*doubled, opset=9, op="Upsample").attrs["nearest2x"]


def test_elementwise_and_data_movement():
    relu = model("Relu", (1, 8, 4, 4), (1, 8, 4, 4))
    assert relu.op_class == "elementwise" and relu.flops == 128 and relu.bytes_moved("fp32") == 4 * 256
    sigmoid = model("Sigmoid", (1, 8, 4, 4), (1, 8, 4, 4))
    assert sigmoid.flops == 4 * 128
    transpose = model("Transpose", (1, 8, 4, 4), (1, 4, 4, 8), perm=[0, 2, 3, 1])
    assert transpose.op_class == "movement" and transpose.flops == 0 and transpose.bytes_moved("fp32") == 4 * 256
