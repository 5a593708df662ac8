"""TensorRT's documented fusions on hand-built graphs, DLA structured sparsity's rules, the boot power mode of every
module against its nvpmodel file's default, and `sdk predict` of a bare ONNX file."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tools.perf.engines import dla_sparse_reason, sparse_candidate
from tools.perf.layers import Layer, layers_of
from tools.perf.platforms import machine, platform_facts
from tools.perf.predict import fusion_groups, predict_device


def _conv(name: str, x: str, y: str, c_in: int, c_out: int, nodes: list, weights: list) -> None:
    w = numpy_helper.from_array(np.ones((c_out, c_in, 3, 3), np.float32), f"{name}.w")
    b = numpy_helper.from_array(np.zeros((c_out,), np.float32), f"{name}.b")
    weights += [w, b]
    nodes.append(helper.make_node("Conv", [x, w.name, b.name], [y], name=name, pads=[1, 1, 1, 1]))


def _silu(name: str, x: str, y: str, nodes: list) -> None:
    nodes.append(helper.make_node("Sigmoid", [x], [f"{name}.s"], name=f"{name}_sigmoid"))
    nodes.append(helper.make_node("Mul", [x, f"{name}.s"], [y], name=f"{name}_mul"))


def _model(nodes: list, weights: list, out: str, channels: int):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 64, 64])],
                              [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)], weights)  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return layers_of(onnx.shape_inference.infer_shapes(model))


def _conv_silu_concat():
    nodes, weights = [], []
    _conv("c1", "x", "a", 16, 32, nodes, weights)
    _silu("act1", "a", "a1", nodes)
    _conv("c2", "x", "b", 16, 32, nodes, weights)
    nodes.append(helper.make_node("LeakyRelu", ["b"], ["b1"], name="leaky", alpha=0.1))
    nodes.append(helper.make_node("Concat", ["a1", "b1"], ["cat"], name="cat", axis=1))
    nodes.append(helper.make_node("Reshape", ["cat", "shape"], ["flat"], name="view"))
    weights.append(numpy_helper.from_array(np.array([1, 64, -1], np.int64), "shape"))
    _conv("c3", "cat", "d", 64, 16, nodes, weights)
    nodes.append(helper.make_node("Relu", ["d"], ["out"], name="relu"))
    return _model(nodes, weights, "out", 16)


def test_conv_silu_is_one_kernel_and_concat_is_free():
    model = _conv_silu_concat()
    groups = {g.head: g.members for g in fusion_groups(model, "tensorrt")}
    assert groups["c1"] == ("c1", "act1_sigmoid", "act1_mul")  # SiLU in the convolution's kernel
    assert groups["c2"] == ("c2", "leaky") and groups["c3"] == ("c3", "relu")
    prediction = predict_device(model, machine("jetson-agx-orin", "MAXN"), "fp16")
    by_head = {p.head: p for p in prediction.layers}
    assert by_head["cat"].ms == 0 and by_head["cat"].bytes == 0 and "in place" in by_head["cat"].fusion
    assert {p.head for p in prediction.layers if p.ms > 0} == {"c1", "c2", "c3", "view"}  # the activations have no kernel
    # The Reshape reads the Concat's output, which the third convolution also reads: not a view TensorRT can omit.
    assert by_head["view"].ms > 0
    without = {p.head: p for p in predict_device(model, machine("jetson-agx-orin", "MAXN"), "fp16", documented=False).layers}
    assert without["c1"].members == ("c1",) and without["cat"].ms > 0 and without["act1_sigmoid"].ms > 0
    # ONNX Runtime keeps its own rules: the Sigmoid x Mul is a node of its own, the Concat a copy.
    host = {g.head: g.members for g in fusion_groups(model, "onnxruntime")}
    assert host["c1"] == ("c1",) and "cat" in host


def test_a_view_and_qdq_cost_no_kernel():
    nodes, weights = [], []
    _conv("c1", "x", "a", 16, 32, nodes, weights)
    nodes.append(helper.make_node("Reshape", ["a", "shape"], ["flat"], name="view"))
    weights.append(numpy_helper.from_array(np.array([1, 32, -1], np.int64), "shape"))
    weights += [numpy_helper.from_array(np.array(0.1, np.float32), "s"), numpy_helper.from_array(np.array(0, np.int8), "z")]
    nodes.append(helper.make_node("QuantizeLinear", ["flat", "s", "z"], ["q"], name="q"))
    nodes.append(helper.make_node("DequantizeLinear", ["q", "s", "z"], ["dq"], name="dq"))
    nodes.append(helper.make_node("Softmax", ["dq"], ["out"], name="softmax", axis=2))
    model = _model(nodes, weights, "out", 32)
    by_head = {p.head: p for p in predict_device(model, machine("jetson-agx-orin", "MAXN"), "int8").layers}
    assert by_head["view"].ms == 0 and "view" in by_head["view"].fusion
    assert by_head["q"].ms == 0 and by_head["dq"].ms == 0 and "folded" in by_head["q"].fusion
    assert by_head["softmax"].ms > 0


def _dla_conv(c_in: int, c_out: int, kernel: int = 3) -> Layer:
    return Layer(index=0, name="c", op="Conv", op_class="conv" if kernel > 1 else "conv_pointwise", inputs=("a",), outputs=("b",),
                 input_shapes=((1, c_in, 32, 32),), output_shapes=((1, c_out, 32, 32),), macs=1, flops=2,
                 weight_elements=c_in * c_out * kernel * kernel, input_elements=1, output_elements=1, channels=(c_in, c_out),
                 kernel=(kernel, kernel), groups=1, strides=(1, 1))  # fmt: skip


def test_dla_structured_sparsity_follows_every_documented_rule():
    assert sparse_candidate(_dla_conv(128, 128), "dla", "int8")
    assert "INT8 only" in dla_sparse_reason(_dla_conv(128, 128), "fp16")  # never for FP16
    assert "input channels" in dla_sparse_reason(_dla_conv(64, 128), "int8")  # more than 64 input channels
    assert sparse_candidate(_dla_conv(65, 128), "dla", "int8")
    assert sparse_candidate(_dla_conv(256, 512), "dla", "int8")  # 1.2M weights: NVIDIA's ResNet-34 sparse figures have them
    assert "output channels" in dla_sparse_reason(_dla_conv(128, 48), "int8")  # 48 % 64 not in {0,1,2,4,8,16,32}
    assert sparse_candidate(_dla_conv(128, 96), "dla", "int8")  # 96 % 64 = 32
    depthwise = Layer(**{**_dla_conv(128, 128).__dict__, "op_class": "conv_depthwise", "groups": 128})
    assert not sparse_candidate(depthwise, "dla", "int8")


NVPMODEL_DEFAULTS = {  # PM_CONFIG DEFAULT of each module's nvpmodel file (the platform facts' sources)
    "jetson-agx-orin-64gb": ("MODE_30W", 2), "jetson-agx-orin-32gb": ("MODE_30W", 2), "jetson-orin-nx-16gb": ("15W", 2),
    "jetson-orin-nx-8gb": ("15W", 2), "jetson-orin-nano-8gb": ("15W", 0), "jetson-orin-nano-4gb": ("10W", 0),
}  # fmt: skip


@pytest.mark.parametrize("platform", sorted(NVPMODEL_DEFAULTS))
def test_each_module_boots_in_its_nvpmodel_default(platform):
    name, mode_id = NVPMODEL_DEFAULTS[platform]
    target = machine(platform)
    assert target.power_mode == target.boot_mode == name and target.at_boot_mode and not target.boot_note
    assert machine(platform, str(mode_id)).power_mode == name  # as `nvpmodel -m ID` names it
    assert platform_facts()["platforms"][platform]["power_modes"]["default_source"]


def test_the_boot_mode_is_slower_than_maxn_and_per_core_dla_clocks():
    agx = machine("jetson-agx-orin")
    assert agx.power_mode == "MODE_30W" and agx.gpu.sparse_tops["int8"] == 41  # not MAXN's 171
    assert machine("jetson-agx-orin", "30W").power_mode == "MODE_30W"  # the short name still works
    nx10 = machine("jetson-orin-nx-16gb", "10W")
    assert nx10.dla.core_mhz == (153.6, 115.0)
    assert nx10.dla.on_core(1).dense_tops["int8"] == pytest.approx(nx10.dla.dense_tops["int8"] * 115 / 153.6)
    unconfirmed = machine("jetson-thor")
    assert unconfirmed.boot_note and unconfirmed.at_boot_mode


def test_predict_a_bare_onnx_file_names_the_boot_mode(sdk, tmp_path):
    nodes, weights = [], []
    _conv("c1", "x", "a", 16, 32, nodes, weights)
    _silu("act", "a", "y", nodes)
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16, 64, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], weights)  # fmt: skip
    path = tmp_path / "bare.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    before = path.read_bytes()
    done = sdk("predict", str(path), "--platform", "jetson-agx-orin", "--batch", "2", "--json", str(tmp_path / "p.json"))
    assert done.returncode == 0, done.stderr
    assert "predicted at MODE_30W, the mode this module boots in; MAXN:" in done.stdout
    report = json.loads((tmp_path / "p.json").read_text())
    assert report["power"]["boot_mode"] == "MODE_30W" and report["power"]["compared_mode"] == "MAXN"
    assert report["power"]["compared_ms"] < report["total"]["predicted_ms"]
    (conv,) = [row for row in report["layers"] if row["op"] == "Conv"]
    assert conv["name"] == "c1 + act_sigmoid + act_mul" and conv["fusion"].startswith("fused into c1")
    assert report["fusions"]["into_convolutions"] == 2  # the Sigmoid and the Mul
    assert report["total"]["without_trt_fusions_ms"] > report["total"]["predicted_ms"]  # the SiLU as a kernel of its own
    assert path.read_bytes() == before  # the file given is never written over
    given = sdk("predict", str(path), "--platform", "jetson-agx-orin", "--power-mode", "MAXN", "--layers")
    assert "every predicted layer" in given.stdout and "fused into c1" in given.stdout
    assert "predicted at MAXN (--power-mode); the module boots in MODE_30W; MODE_30W:" in given.stdout
    missing = sdk("predict", str(tmp_path / "bear.onnx"), "--platform", "jetson-agx-orin")
    assert missing.returncode == 1 and "bear.onnx: no such ONNX file" in missing.stderr and "did you mean" in missing.stderr
    no_dla = sdk("predict", str(path), "--platform", "host", "--dla")
    assert no_dla.returncode == 1 and "--dla needs a platform with DLA cores" in no_dla.stderr
    refused = sdk("predict", str(path), "--platform", "jetson-agx-orin", "--power-mode", "TURBO")
    assert refused.returncode == 1 and "no power mode 'TURBO'" in refused.stderr and "MODE_30W (2)" in refused.stderr


def test_a_prediction_on_an_unconfirmed_ratio_says_so():
    model = _conv_silu_concat()
    thor = predict_device(model, machine("jetson-thor"), "int8")
    assert any(n.startswith("unconfirmed: Thor's INT8") for n in thor.notes)
    assert not any("unconfirmed" in n for n in predict_device(model, machine("jetson-thor"), "fp16").notes)
    assert not any("unconfirmed" in n for n in predict_device(model, machine("jetson-agx-orin"), "int8").notes)


def test_a_device_reported_mode_matches_the_table():
    from tools.perf.assemble import _mode

    assert _mode({"power_mode": "MODE_30W"}, "jetson-agx-orin") == "MODE_30W"  # as `nvpmodel -q` prints it
    assert _mode({"power_mode": "MAXN_SUPER"}, "jetson-orin-nx-16gb") == "MAXN_SUPER"
    assert _mode({"power_mode": "CUSTOM_9W"}, "jetson-agx-orin") is None and _mode({}, "jetson-agx-orin") is None
