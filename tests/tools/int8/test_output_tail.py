"""What stays out of INT8 in every model: the output tail (score activations and data movement after the last
weighted layers) and the range of a bounded activation. A tiny synthetic detector head, built here: seconds."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from tools.int8.activation_stats import ActivationStatistics, CalibratedTensor, CalibrationPlan
from tools.int8.calibrate import CalibrationArtifacts, chosen_ranges, write_onnxruntime_ranges, write_qdq
from tools.int8.output_tail import bounded_outputs, output_tail
from tools.int8.sensitivity import FallbackToFp16

# The head's tail, as YOLOX's ends: raw regression, sigmoid objectness and class scores concatenated, reshaped, transposed.
TAIL = ["score_sigmoid", "head_concat", "head_reshape", "head_transpose"]


def tiny_head(path) -> None:
    """x -> stem Conv -> SiLU (Sigmoid, Mul) -> [reg Conv, cls Conv -> Sigmoid] -> Concat -> Reshape -> Transpose.
    The SiLU's Sigmoid is read by a Mul (arithmetic): it is no part of the tail. A Reshape whose output is also read
    by a Conv (`side_reshape`) is not either."""
    rng = np.random.default_rng(0)

    def weight(name, shape):
        return numpy_helper.from_array(rng.normal(0, 0.5, shape).astype(np.float32), name)

    nodes = [
        helper.make_node("Conv", ["x", "w_stem"], ["stem"], name="stem_conv", pads=[1, 1, 1, 1]),
        helper.make_node("Sigmoid", ["stem"], ["stem_gate"], name="silu_sigmoid"),
        helper.make_node("Mul", ["stem", "stem_gate"], ["features"], name="silu_mul"),
        helper.make_node("Reshape", ["features", "same_shape"], ["side"], name="side_reshape"),
        helper.make_node("Conv", ["side", "w_side"], ["side_out"], name="side_conv"),
        helper.make_node("Conv", ["features", "w_reg"], ["reg"], name="reg_conv"),
        helper.make_node("Conv", ["features", "w_cls"], ["cls"], name="cls_conv"),
        helper.make_node("Sigmoid", ["cls"], ["scores"], name="score_sigmoid"),
        helper.make_node("Concat", ["reg", "scores"], ["head"], name="head_concat", axis=1),
        helper.make_node("Reshape", ["head", "flat_shape"], ["flat"], name="head_reshape"),
        helper.make_node("Transpose", ["flat"], ["output"], name="head_transpose", perm=[0, 2, 1]),
    ]
    initializers = [
        weight("w_stem", (8, 3, 3, 3)),
        weight("w_side", (2, 8, 1, 1)),
        weight("w_reg", (4, 8, 1, 1)),
        weight("w_cls", (3, 8, 1, 1)),
        numpy_helper.from_array(np.array([1, 8, 6, 6], np.int64), "same_shape"),
        numpy_helper.from_array(np.array([1, 7, 36], np.int64), "flat_shape"),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny_head",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 6, 6])],
        [
            helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 36, 7]),
            helper.make_tensor_value_info("side_out", TensorProto.FLOAT, [1, 2, 6, 6]),
        ],
        initializers,
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))


def observed_ranges(path, frames: list[np.ndarray]) -> dict[str, dict[str, float]]:
    """Min-max ranges of every tensor on these frames (the Q/DQ writer only reads the ranges)."""
    model = onnx.load(str(path))
    names = [o for node in model.graph.node for o in node.output]
    have = {o.name for o in model.graph.output}
    model.graph.output.extend(onnx.ValueInfoProto(name=n) for n in names if n not in have)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    values = [session.run(names, {"x": frame}) for frame in frames]
    ranges = {"x": {"min": 0.0, "max": 1.0, "amax": 1.0}}
    for k, name in enumerate(names):
        low, high = min(float(v[k].min()) for v in values), max(float(v[k].max()) for v in values)
        ranges[name] = {"min": low, "max": high, "amax": max(abs(low), abs(high))}
    return ranges


def qdq_tensors(path) -> set[str]:
    """The tensors a QuantizeLinear reads in this model."""
    return {node.input[0] for node in onnx.load(str(path)).graph.node if node.op_type == "QuantizeLinear"}


def int8_layers(path) -> set[str]:
    """The Conv nodes whose activation and weight both come through a DequantizeLinear."""
    graph = onnx.load(str(path)).graph
    dequantized = {node.output[0] for node in graph.node if node.op_type == "DequantizeLinear"}
    return {node.name for node in graph.node if node.op_type == "Conv" and {node.input[0], node.input[1]} <= dequantized}


def output_writer(path) -> str:
    """The op writing the model's output `output`."""
    return next(node.op_type for node in onnx.load(str(path)).graph.node if "output" in node.output)


def test_the_tail_is_what_follows_the_last_weighted_layers_to_the_outputs(tmp_path):
    tiny_head(tmp_path / "head.onnx")
    graph = onnx.load(str(tmp_path / "head.onnx")).graph
    assert output_tail(graph) == TAIL  # not the SiLU's Sigmoid (a Mul reads it), not a Reshape a Conv reads
    assert bounded_outputs(graph) == {"stem_gate", "scores"}


def test_the_qdq_model_keeps_the_tail_in_float_and_the_weighted_layers_in_int8(tmp_path):
    model = tmp_path / "head.onnx"
    tiny_head(model)
    frames = [np.random.default_rng(k).uniform(0, 1, (1, 3, 6, 6)).astype(np.float32) for k in range(4)]
    ranges = observed_ranges(model, frames)
    ranges["scores"]["amax"] = 0.18  # what entropy made of YOLOX's class scores: every score clipped below a 0.3 threshold
    write_onnxruntime_ranges(ranges, "minmax", tmp_path / "ranges.json")
    write_qdq(model, tmp_path / "all.onnx", tmp_path / "ranges.json", "minmax")
    write_qdq(model, tmp_path / "tail.onnx", tmp_path / "ranges.json", "minmax", exclude=output_tail(onnx.load(str(model)).graph))
    assert {"scores", "head", "flat"} <= qdq_tensors(tmp_path / "all.onnx")  # ONNX Runtime's quantizer: everything,
    assert output_writer(tmp_path / "all.onnx") == "DequantizeLinear"  # the model's output too
    kept = qdq_tensors(tmp_path / "tail.onnx")
    assert not {"scores", "head", "flat"} & kept and output_writer(tmp_path / "tail.onnx") == "Transpose"  # the tail: float
    assert int8_layers(tmp_path / "tail.onnx") == {"stem_conv", "side_conv", "reg_conv", "cls_conv"}  # they stay INT8

    fp32, all_int8, tail_float = (
        ort.InferenceSession(str(p), providers=["CPUExecutionProvider"]) for p in (model, tmp_path / "all.onnx", tmp_path / "tail.onnx")
    )
    for frame in frames:
        reference = fp32.run(["output"], {"x": frame})[0][..., 4:]  # the scores
        assert reference.max() > 0.3
        assert all_int8.run(["output"], {"x": frame})[0][..., 4:].max() <= 0.19  # clipped: no detection survives 0.3
        np.testing.assert_allclose(tail_float.run(["output"], {"x": frame})[0][..., 4:], reference, atol=0.05)


def statistics_of(values: np.ndarray) -> ActivationStatistics:
    """The statistics of one observed tensor `scores` (and `flat`, a Reshape of it, derived) as the collector counts
    them: min, max and a |x| histogram on a power-of-two grid."""
    from tools.int8.histogram_kernel import HISTOGRAM_BINS

    width = 2.0**-12
    histogram = np.bincount(np.minimum((np.abs(values) / width).astype(np.int64), HISTOGRAM_BINS - 1), minlength=HISTOGRAM_BINS)
    plan = CalibrationPlan(observed=(CalibratedTensor("scores", (values.size,)),), derived={"flat": "scores"})
    return ActivationStatistics(plan, np.array([values.min()]), np.array([values.max()]), histogram[None, :], np.array([width]), frames=1)


def test_a_bounded_activation_keeps_its_observed_maximum_whatever_the_method():
    """Scores: most near 0, a few confident ones. Entropy and percentile follow the mass and clip the confident
    scores; a Sigmoid's output keeps its maximum, also where a Reshape of it takes its statistics."""
    rng = np.random.default_rng(0)
    values = np.concatenate([1 / (1 + np.exp(-rng.normal(-6, 1.5, 200_000))), rng.uniform(0.3, 0.94, 20)])
    statistics = statistics_of(values)
    for method in ("entropy", "percentile"):
        clipped = chosen_ranges(statistics, method, 99.99)
        assert clipped["scores"]["amax"] < 0.6 * values.max(), method  # the case this guards against (entropy: < 0.3)
        kept = chosen_ranges(statistics, method, 99.99, bounded=frozenset({"scores"}))
        assert kept["scores"]["amax"] == kept["flat"]["amax"] == values.max(), method


def test_the_fallback_search_keeps_the_tail_in_float_in_every_model_it_judges(tmp_path):
    """Its trials and final model exclude the calibration's output tail besides the layers kept; a probe of one
    layer alone (`only`) quantizes just that layer."""
    model = tmp_path / "head.onnx"
    tiny_head(model)
    ranges = observed_ranges(model, [np.random.default_rng(0).uniform(0, 1, (1, 3, 6, 6)).astype(np.float32)])
    artifacts = CalibrationArtifacts(tmp_path)
    write_onnxruntime_ranges(ranges, "minmax", artifacts.onnxruntime_ranges)
    artifacts.ranges.write_text(json.dumps({"method": "minmax", "tensors": ranges, "output_tail": TAIL}))
    search = FallbackToFp16.__new__(FallbackToFp16)
    search.model, search.artifacts, search.method, search._weight_scales = SimpleNamespace(model_path=model), artifacts, "minmax", None
    search._graph_nodes = None
    search.write_qdq(tmp_path / "trial.onnx", exclude=["reg_conv"])
    kept = qdq_tensors(tmp_path / "trial.onnx")
    assert not {"scores", "head", "flat"} & kept and output_writer(tmp_path / "trial.onnx") == "Transpose"
    assert int8_layers(tmp_path / "trial.onnx") == {"stem_conv", "side_conv", "cls_conv"}
    search.write_qdq(tmp_path / "probe.onnx", only=["cls_conv"])
    assert int8_layers(tmp_path / "probe.onnx") == {"cls_conv"}


def reads_dequantized(path, node_name: str) -> bool:
    """Whether this node's first input comes through a DequantizeLinear (it reads an INT8 tensor)."""
    graph = onnx.load(str(path)).graph
    dequantized = {node.output[0] for node in graph.node if node.op_type == "DequantizeLinear"}
    return next(node for node in graph.node if node.name == node_name).input[0] in dequantized


def test_qdq_on_weighted_inputs_only_so_a_layer_kept_in_float_reads_float(tmp_path):
    """`weighted_inputs`, TensorRT's placement (measured, not yet the SDK's default: decision 1125): Q/DQ on the inputs
    of weighted layers and nowhere else (no activation, no data movement, no layer output). Then a layer kept in float
    reads the float tensor; with ONNX Runtime's own placement its producer's output Q/DQ still clips what it reads."""
    model = tmp_path / "head.onnx"
    tiny_head(model)
    ranges = observed_ranges(model, [np.random.default_rng(0).uniform(0, 1, (1, 3, 6, 6)).astype(np.float32)])
    write_onnxruntime_ranges(ranges, "minmax", tmp_path / "ranges.json")
    write_qdq(model, tmp_path / "weighted.onnx", tmp_path / "ranges.json", "minmax", weighted_inputs=True)
    assert qdq_tensors(tmp_path / "weighted.onnx") == {"x", "features", "side"}  # the Conv inputs (weights are stored INT8)
    assert int8_layers(tmp_path / "weighted.onnx") == {"stem_conv", "side_conv", "reg_conv", "cls_conv"}
    assert output_writer(tmp_path / "weighted.onnx") == "Transpose"
    for placement in (False, True):
        path = tmp_path / f"kept-{placement}.onnx"
        write_qdq(model, path, tmp_path / "ranges.json", "minmax", exclude=["side_conv"], weighted_inputs=placement)
        assert "side_conv" not in int8_layers(path)
        assert reads_dequantized(path, "side_conv") is not placement  # ONNX Runtime's placement: still an INT8 input


def test_the_calibration_keeps_the_examples_output_tail_in_float_and_records_it(tmp_path_factory):
    """The example detector's calibration (shared with test_calibrate): ranges.json names its output tail (the box
    predictors' reshapes and the two concatenations), and its Q/DQ model quantizes none of the tail's tensors."""
    from tests.tools.int8.test_calibrate import shared_calibration

    _, model, artifacts = shared_calibration(tmp_path_factory, "minmax")
    graph = onnx.load(str(model.model_path), load_external_data=False).graph
    tail = output_tail(graph)
    assert artifacts.output_tail() == tail and {"concat", "concat_1"} <= set(tail)
    written = {name for node in graph.node if node.name in tail for name in node.output}
    assert not written & qdq_tensors(artifacts.qdq_model)
    qdq = onnx.load(str(artifacts.qdq_model)).graph
    assert {node.op_type for node in qdq.node if {"concat:0", "concat_1:0"} & set(node.output)} == {"Concat"}  # float outputs
