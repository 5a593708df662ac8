"""ONNX Runtime folds a constant Mul or Add into the convolution before it only as its ConvMulFusion and ConvAddFusion
rules allow (decision 1142): the constant second, a scalar (Mul) or one value per output channel; any other scale or
shift is a node of its own on the host, while TensorRT's grouping is unchanged. Hand-built graphs."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tools.perf.layers import layers_of
from tools.perf.predict import fusion_groups

CHANNELS = 8


def _conv_then(op: str, constant: np.ndarray, first: bool = False):
    """images -> Conv (8 channels) -> `op` with `constant` (its first input where `first`) -> Relu."""
    weights = [numpy_helper.from_array(np.ones((CHANNELS, 3, 3, 3), np.float32), "w"), numpy_helper.from_array(constant, "k")]
    operands = ["k", "c"] if first else ["c", "k"]
    nodes = [helper.make_node("Conv", ["images", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node(op, operands, ["s"], name="scale"), helper.make_node("Relu", ["s"], ["y"], name="relu")]  # fmt: skip
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, CHANNELS, 16, 16])], weights)  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    return layers_of(onnx.shape_inference.infer_shapes(model))


def _groups(model, backend: str) -> list[tuple[str, ...]]:
    return [g.members for g in fusion_groups(model, backend)]


@pytest.mark.parametrize(
    ("op", "shape"),
    [("Mul", ()), ("Mul", (CHANNELS, 1, 1)), ("Mul", (1, CHANNELS, 1, 1)), ("Add", (CHANNELS, 1, 1)), ("Add", (1, CHANNELS, 1, 1))],
)
def test_a_scalar_or_per_channel_constant_second_folds_into_the_convolution(op, shape):
    model = _conv_then(op, np.full(shape, 2.0, np.float32))
    assert _groups(model, "onnxruntime") == [("conv", "scale", "relu")]


@pytest.mark.parametrize(
    ("op", "shape", "first"),
    [
        ("Mul", (1,), False),  # one value, but not a scalar: ConvMulFusion wants rank 0 or one per output channel
        ("Mul", (), True),  # the constant first (Mul(k, x)): the rule reads the Mul's second input
        ("Add", (), False),  # a scalar shift: ConvAddFusion wants one value per output channel
        ("Sub", (CHANNELS, 1, 1), False),  # no fusion rule for Sub or Div
        ("Div", (), False),
    ],
)
def test_any_other_constant_scale_or_shift_runs_as_its_own_node_on_the_host(op, shape, first):
    model = _conv_then(op, np.full(shape, 2.0, np.float32), first)
    assert _groups(model, "onnxruntime") == [("conv",), ("scale",), ("relu",)]
    assert ("conv", "scale", "relu") in _groups(model, "tensorrt")  # TensorRT's grouping is not ONNX Runtime's
