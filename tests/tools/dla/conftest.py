"""Small ONNX graphs built in the tests: a DLA-friendly chain with one layer under test in the middle."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from sdk.engine.platforms import TensorRTVersion, dla_availability
from tools.dla.analysis import analyse
from tools.dla.graph import graph_from_model


class GraphBuilder:
    """conv(3x3) -> [the layers under test] -> conv(1x1): the middle decides where the graph runs."""

    def __init__(self, shape=(1, 8, 16, 16), dtype=TensorProto.FLOAT) -> None:
        self.nodes, self.weights, self.count = [], [], 0
        self.input = helper.make_tensor_value_info("x", dtype, list(shape))
        self.dtype = dtype
        self.last = "x"

    def const(self, array) -> str:
        self.count += 1
        name = f"w{self.count}"
        self.weights.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def add(self, op: str, *extra_inputs, inputs=None, **attributes) -> str:
        self.count += 1
        out = f"t{self.count}"
        self.nodes.append(helper.make_node(op, [*(inputs or [self.last]), *extra_inputs], [out], name=f"{op.lower()}_{self.count}", **attributes))
        self.last = out
        return out

    def conv(self, in_channels=8, out_channels=8, kernel=3, **attributes) -> str:
        weight = self.const(np.zeros((out_channels, in_channels, kernel, kernel), np.float32))
        attributes.setdefault("pads", [kernel // 2] * 4)
        return self.add("Conv", weight, **attributes)

    def model(self):
        output = helper.make_tensor_value_info(self.last, self.dtype, None)
        graph = helper.make_graph(self.nodes, "g", [self.input], [output], self.weights)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        return onnx.shape_inference.infer_shapes(model, data_prop=True)


def run_analysis(model, platform="jetson-agx-orin", tensorrt="10.3", precision="int8", cores=None):
    version = TensorRTVersion.parse(tensorrt)
    return analyse(graph_from_model(model), "test.onnx", platform, version, dla_availability(platform, version, cores), precision)


@pytest.fixture()
def builder():
    return GraphBuilder


@pytest.fixture()
def analysis():
    return run_analysis
