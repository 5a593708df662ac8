"""Q/DQ models of detectors exported at an opset older than 13 (YOLOX's ONNX files are opset 11), and `sdk calibrate`
on a pipeline that has no `calibration` section yet."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from tools.int8.calibrate import write_onnxruntime_ranges, write_qdq

REPO = Path(__file__).resolve().parents[3]


def opset_11_model(path: Path) -> None:
    """A Conv with four output channels (per-channel weights), a ReLU and a Squeeze whose axes are an attribute (an
    input from opset 13 on: the converter must rewrite it)."""
    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.normal(size=(4, 3, 3, 3)).astype(np.float32) * np.array([1, 2, 4, 8], np.float32)[:, None, None, None], "w")
    bias = numpy_helper.from_array(rng.normal(size=4).astype(np.float32), "b")
    nodes = [
        helper.make_node("Conv", ["image", "w", "b"], ["conv_out"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["conv_out"], ["relu_out"], name="relu"),
        helper.make_node("Squeeze", ["relu_out"], ["out"], name="squeeze", axes=[0]),
    ]
    graph = helper.make_graph(
        nodes,
        "opset11",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [4, 8, 8])],
        [weight, bias],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)], ir_version=7), str(path))


def test_an_opset_11_model_gets_a_qdq_model_onnx_runtime_loads_with_per_channel_weights(tmp_path):
    model = tmp_path / "m.onnx"
    opset_11_model(model)
    image = np.random.default_rng(1).uniform(-1, 1, size=(1, 3, 8, 8)).astype(np.float32)
    fp32 = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    reference = fp32.run(None, {"image": image})
    ranges = {"image": {"amax": 1.0}, "conv_out": {"amax": float(np.abs(reference[0]).max()) * 1.05}}
    ranges |= {"relu_out": ranges["conv_out"], "out": ranges["conv_out"]}
    write_onnxruntime_ranges(ranges, "minmax", tmp_path / "ranges.cache")
    qdq = tmp_path / "m.qdq.onnx"
    write_qdq(model, qdq, tmp_path / "ranges.cache", "minmax")

    written = onnx.load(str(qdq))
    assert next(o.version for o in written.opset_import if o.domain in ("", "ai.onnx")) == 13
    per_channel = [n for n in written.graph.node if n.op_type == "DequantizeLinear" and any(a.name == "axis" for a in n.attribute)]
    assert per_channel, "the Conv's weights are quantized per output channel"
    assert {"conv", "relu", "squeeze"} <= {n.name for n in written.graph.node}  # the names the ranges and fallbacks use
    assert onnx.load(str(model)).opset_import[0].version == 11  # the model given is only read
    session = ort.InferenceSession(str(qdq), providers=["CPUExecutionProvider"])  # before the fix: "Unrecognized attribute: axis"
    (out,) = session.run(None, {"image": image})
    assert out.shape == (4, 8, 8)
    cosine = float(np.dot(out.ravel(), reference[0].ravel()) / np.linalg.norm(out) / np.linalg.norm(reference[0]))
    assert cosine >= 0.99  # the accuracy gate's default: INT8's error, not another graph (measured 0.998)


def test_sdk_calibrate_without_a_calibration_section_uses_its_defaults_and_says_so(tmp_path, monkeypatch, capfd):
    """The YOLOX example has no `calibration` section: `sdk calibrate` takes the section's defaults (300 frames and
    50 held out, from the pipeline's own source), says so, and then says in one line that its 29 photographs are too
    few, where it used to fail with a traceback."""
    from tools.cli import run

    folder = tmp_path / "p"
    shutil.copytree(REPO / "pipelines" / "assets", folder / "assets")
    shutil.copyfile(REPO / "pipelines" / "yolox_nano.yaml", folder / "yolox_nano.yaml")
    monkeypatch.setenv("SDK_STATE_DIR", str(tmp_path / "state"))
    capfd.readouterr()
    status = run(["calibrate", str(folder / "yolox_nano.yaml"), "--out", str(tmp_path / "int8")])
    out, err = capfd.readouterr()
    assert status == 1 and "Traceback" not in err and err.count("error:") == 1 and err.count("hint:") == 1
    assert "no `calibration` section: its defaults" in out + err
    assert "frames (300) + holdout_frames (50) = 350 different frames needed; the source has 29" in err
