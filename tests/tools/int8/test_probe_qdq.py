"""The one-layer Q/DQ writer of the sensitivity ranking (tools/int8/probe_qdq.py) writes, byte for byte, the model
`write_qdq(only=[layer])` writes through ONNX Runtime's quantizer of the whole model, on the real detector."""

from __future__ import annotations

import onnx

from tests.tools.int8.test_calibrate import shared_calibration
from tools.int8.calibrate import conv_weight_scales, write_qdq
from tools.int8.probe_qdq import OneLayerProbes


def test_a_probe_is_the_quantizers_own_model_byte_for_byte(tmp_path, tmp_path_factory):
    """Each kind of layer the splice treats differently: the stem (it reads the graph input), the first depthwise
    convolution, a depthwise convolution whose input three layers read (all three are rewired to the Q/DQ pair, as
    the quantizer rewires them), and the last box predictor (a Reshape reads its output; it has a bias of its own
    name). A layer the writer does not take (not a Conv) is left to the whole way (None)."""
    _, model, artifacts = shared_calibration(tmp_path_factory, "minmax")
    graph = onnx.load(str(model.model_path)).graph
    convs = [node for node in graph.node if node.op_type == "Conv"]
    readers = {}
    for node in graph.node:
        for name in node.input:
            readers[name] = readers.get(name, 0) + 1
    shared_input = next(node for node in convs if readers[node.input[0]] >= 3)
    layers = [convs[0].name, convs[1].name, shared_input.name, convs[-1].name]
    scales = conv_weight_scales(onnx.load(str(model.model_path)))
    probes = OneLayerProbes(model.model_path, artifacts.onnxruntime_ranges, "minmax", scales)
    for layer in layers:
        write_qdq(model.model_path, tmp_path / "whole.onnx", artifacts.onnxruntime_ranges, "minmax", only=[layer], weight_scales=scales)
        assert probes.probe_bytes(layer) == (tmp_path / "whole.onnx").read_bytes(), layer
    assert probes.probe_bytes(next(node.name for node in graph.node if node.op_type == "Concat")) is None
    assert probes.probe_bytes("no such layer") is None
