"""Where `--platform host` puts ONNX Runtime's NCHWc kernels and reorders (tools/perf/nchwc.py), checked against the
graph ONNX Runtime itself optimises on this CPU: one hand-built graph per rule of its NCHWc transform, and YOLOX-Nano
whole. Each reorder ONNX Runtime inserts is a node the prediction must cost; each NCHWc kernel one that splits its
work over the threads (decision 1259)."""

from __future__ import annotations

import collections
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tools.perf.layers import layers_of, load_layers
from tools.perf.nchwc import nchwc_block, nchwc_kernels, reorders
from tools.perf.predict import fusion_groups

REPO = Path(__file__).resolve().parents[3]
BLOCK = nchwc_block()
pytestmark = pytest.mark.skipif(BLOCK == 0, reason="ONNX Runtime's NCHWc transform runs only on x86-64 with AVX2 or AVX-512")


def _ort_nchwc(path: Path, tmp_path: Path) -> tuple[int, int]:
    """(reorders, NCHWc kernels) in the graph ONNX Runtime optimises from `path` on this CPU."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    options.log_severity_level = 3  # its warning that such a graph is for this CPU only
    ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    graph = onnx.load(str(tmp_path / "optimized.onnx")).graph
    found = collections.Counter(node.op_type for node in graph.node if node.domain == "com.microsoft.nchwc")
    reordered = found.pop("ReorderInput", 0) + found.pop("ReorderOutput", 0)
    return reordered, sum(found.values())


def _check(model: onnx.ModelProto, tmp_path: Path) -> tuple[int, int]:
    path = tmp_path / "model.onnx"
    onnx.save(model, str(path))
    layers = layers_of(onnx.shape_inference.infer_shapes(model), str(path))
    groups = fusion_groups(layers, "onnxruntime")
    predicted = (len(reorders(layers, BLOCK, groups)), len(nchwc_kernels(layers, BLOCK, groups)))
    assert predicted == _ort_nchwc(path, tmp_path)
    return predicted


def _model(nodes, inputs: dict[str, list[int]], output: str, weights: dict[str, np.ndarray]) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()],
                              [helper.make_tensor_value_info(output, TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(v, k) for k, v in weights.items()])  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def _w(c_out: int, c_in: int, k: int = 1, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).random((c_out, c_in, k, k), dtype=np.float32) - 0.5


def test_a_maxpool_of_an_nchw_tensor_is_reordered_in_a_global_pool_is_not(tmp_path):
    c = 2 * BLOCK
    pools = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("GlobalAveragePool", ["r"], ["g"]), helper.make_node("Add", ["p", "g"], ["y"])]  # fmt: skip
    assert _check(_model(pools, {"x": [1, c, 16, 16]}, "y", {}), tmp_path) == (2, 1)  # in and out for the MaxPool alone


def test_a_convolution_takes_input_channels_in_fours_and_reads_fewer_than_a_block_as_they_are(tmp_path):
    # BLOCK + 4: reordered in and padded; BLOCK + 2: not a multiple of 4, a plain Conv; BLOCK // 2: read as NCHW
    for c_in, expected in ((BLOCK + 4, (2, 1)), (BLOCK + 2, (0, 0)), (BLOCK // 2, (1, 1))):
        conv = [helper.make_node("Conv", ["x", "w"], ["y"])]
        assert _check(_model(conv, {"x": [1, c_in, 16, 16]}, "y", {"w": _w(BLOCK, c_in, 3)}), tmp_path) == expected, c_in


def test_a_concat_of_whole_blocks_stays_blocked_a_ragged_one_is_reordered_out(tmp_path):
    # x in and y out; ragged: p and q out, and the concatenation in again for the last convolution
    for extra, expected in ((BLOCK, (2, 3)), (BLOCK + 4, (5, 3))):
        nodes = [helper.make_node("Conv", ["x", "a"], ["p"]), helper.make_node("Conv", ["x", "b"], ["q"]),
                 helper.make_node("Concat", ["p", "q"], ["c"], axis=1), helper.make_node("Conv", ["c", "d"], ["y"])]  # fmt: skip
        weights = {"a": _w(BLOCK, BLOCK), "b": _w(extra, BLOCK, seed=1), "d": _w(BLOCK, BLOCK + extra, seed=2)}
        assert _check(_model(nodes, {"x": [1, BLOCK, 8, 8]}, "y", weights), tmp_path) == expected, extra


def test_a_broadcast_product_leaves_the_blocked_layout_a_same_shape_one_does_not(tmp_path):
    c = 2 * BLOCK
    se = [helper.make_node("Conv", ["x", "w"], ["f"]), helper.make_node("GlobalAveragePool", ["f"], ["g"]),
          helper.make_node("Conv", ["g", "v"], ["s"]), helper.make_node("Sigmoid", ["s"], ["t"]),
          helper.make_node("Mul", ["f", "t"], ["m"]), helper.make_node("Conv", ["m", "u"], ["y"])]  # fmt: skip
    weights = {"w": _w(c, c), "v": _w(c, c, seed=1), "u": _w(c, c, seed=2)}
    reordered, kernels = _check(_model(se, {"x": [1, c, 8, 8]}, "y", weights), tmp_path)
    assert kernels == 4 and reordered == 5  # x in, f and t out for the broadcast Mul, its product in again, y out


def test_x_times_sigmoid_of_a_scaled_x_stays_blocked(tmp_path):
    c = 2 * BLOCK
    gelu = [helper.make_node("Conv", ["x", "w"], ["f"]), helper.make_node("Mul", ["f", "a"], ["s"]), helper.make_node("Sigmoid", ["s"], ["t"]),
            helper.make_node("Mul", ["f", "t"], ["m"]), helper.make_node("Conv", ["m", "u"], ["y"])]  # fmt: skip
    weights = {"w": _w(c, c), "u": _w(c, c, seed=1), "a": np.array(1.702, np.float32)}
    assert _check(_model(gelu, {"x": [1, c, 8, 8]}, "y", weights), tmp_path) == (2, 2)  # x in, y out: QuickGelu runs on blocks


def test_a_tensor_two_convolutions_read_is_reordered_in_once(tmp_path):
    nodes = [helper.make_node("Conv", ["x", "a"], ["p"]), helper.make_node("Conv", ["x", "b"], ["q"]), helper.make_node("Add", ["p", "q"], ["y"])]
    assert _check(_model(nodes, {"x": [1, BLOCK, 8, 8]}, "y", {"a": _w(BLOCK, BLOCK), "b": _w(BLOCK, BLOCK, seed=1)}), tmp_path) == (2, 2)


def test_yolox_nano_as_onnx_runtime_places_it(tmp_path):
    path = REPO / "tests" / "integration" / "assets" / "yolox_nano.onnx"
    layers = load_layers(path)
    groups = fusion_groups(layers, "onnxruntime")
    predicted = (len(reorders(layers, BLOCK, groups)), len(nchwc_kernels(layers, BLOCK, groups)))
    assert predicted == _ort_nchwc(path, tmp_path) and predicted[1] > 100


def test_a_batch_norm_of_its_own_is_a_blocked_convolution_and_a_dropout_passes_the_blocks_through(tmp_path):
    c = 2 * BLOCK
    nodes = [helper.make_node("Conv", ["x", "w"], ["f"]), helper.make_node("Relu", ["f"], ["r"]), helper.make_node("Dropout", ["r"], ["d"]),
             helper.make_node("BatchNormalization", ["d", "s", "b", "m", "v"], ["n"]), helper.make_node("Conv", ["n", "u"], ["y"])]  # fmt: skip
    ones = np.ones(c, np.float32)
    weights = {"w": _w(c, c), "u": _w(c, c, seed=1), "s": ones, "b": ones / 2, "m": ones / 4, "v": ones}
    assert _check(_model(nodes, {"x": [1, c, 8, 8]}, "y", weights), tmp_path) == (2, 3)  # the batch norm a 1x1 depthwise one
