"""`model.inputs`: constant inputs besides the image, bound once. No published model with such inputs ships in a
package we can use here, so the real BlazeFace is wrapped with onnx (tests say so): it takes raw uint8 NHWC pixels
(normalised inside the graph) plus `scale_factor` (float32 [1, 2]) and `im_shape` (int64 [1, 2]) that scale its
box outputs, so detections match the reference only if the constants reach the model as given."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from sdk.backends.onnxruntime_cpu import OnnxRuntimeBackend
from sdk.errors import ConfigError, ModelError
from sdk.runtime.constants import split_inputs
from sdk.spec.loader import load_pipeline
from tests.integration.mediapipe_reference import compare, deploy_local, reference_anchors
from tests.integration.test_blazeface_real_model import ASSETS, NAMES, PIPELINE, one_box_and_one_score_tensor, portrait_frames


def wrapped_blazeface(folder: Path) -> tuple[Path, Path]:
    """(the joined BlazeFace, the same with a uint8 NHWC image input and two constant inputs)."""
    joined = one_box_and_one_score_tensor(ASSETS / "blazeface_front_128.onnx", folder / "blazeface.onnx")
    model = onnx.load(str(joined))
    graph = model.graph
    for node in graph.node:  # the original input and box output are renamed inside; the new ones take their places
        node.input[:] = ["input_f" if i == "input:0" else i for i in node.input]
        node.output[:] = ["regressors_raw" if o == "regressors" else o for o in node.output]
    del graph.input[:]
    graph.input.extend(
        [
            helper.make_tensor_value_info("image", TensorProto.UINT8, [1, 128, 128, 3]),
            helper.make_tensor_value_info("scale_factor", TensorProto.FLOAT, [1, 2]),
            helper.make_tensor_value_info("im_shape", TensorProto.INT64, [1, 2]),
        ]
    )
    graph.initializer.extend(
        [
            helper.make_tensor("k", TensorProto.FLOAT, [], [1 / 127.5]),
            helper.make_tensor("one", TensorProto.FLOAT, [], [1.0]),
            helper.make_tensor("side", TensorProto.FLOAT, [], [128.0]),
        ]
    )
    graph.node.extend(
        [
            helper.make_node("Cast", ["image"], ["image_f"], to=TensorProto.FLOAT),
            helper.make_node("Mul", ["image_f", "k"], ["image_k"]),
            helper.make_node("Sub", ["image_k", "one"], ["input_f"]),
            helper.make_node("ReduceProd", ["scale_factor"], ["sf"], keepdims=0),
            helper.make_node("Cast", ["im_shape"], ["shape_f"], to=TensorProto.FLOAT),
            helper.make_node("Div", ["shape_f", "side"], ["shape_r"]),
            helper.make_node("ReduceProd", ["shape_r"], ["sr"], keepdims=0),
            helper.make_node("Mul", ["sf", "sr"], ["factor"]),
            helper.make_node("Mul", ["regressors_raw", "factor"], ["regressors"]),
        ]
    )
    nodes = list(graph.node)
    head = [n for n in nodes if n.output[0] in ("image_f", "image_k", "input_f")]
    rest = [n for n in nodes if n not in head]
    del graph.node[:]
    graph.node.extend(head + rest)
    onnx.checker.check_model(model)
    target = folder / "blazeface_constants.onnx"
    onnx.save(model, str(target))
    return joined, target


def test_constants_are_written_once_into_the_bound_buffers_and_reach_the_model(tmp_path):
    _, model = wrapped_blazeface(tmp_path)
    image = np.random.default_rng(0).integers(0, 256, (1, 128, 128, 3), dtype=np.uint8)
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    with OnnxRuntimeBackend(model) as backend:
        name, buffer = split_inputs(backend, {"scale_factor": (2.0, 0.5), "im_shape": (256.0, 64.0)}, model)
        assert name == "image" and buffer is backend.inputs["image"] and buffer.dtype == np.uint8
        assert backend.inputs["im_shape"].dtype == np.int64 and backend.inputs["im_shape"].tolist() == [[256, 64]]
        for factor in (1.0, 3.0):  # a different product of the constants: the model sees exactly what was given
            split_inputs(backend, {"scale_factor": (factor, 1.0), "im_shape": (128.0, 128.0)}, model)
            buffer[...] = image
            backend.infer()
            feeds = {"image": image, "scale_factor": np.array([[factor, 1.0]], np.float32), "im_shape": np.array([[128, 128]], np.int64)}
            expected = session.run(["regressors"], feeds)[0]
            np.testing.assert_array_equal(backend.outputs["regressors"], expected)


@pytest.mark.parametrize(
    ("constants", "message"),
    [
        (
            {"scale_factor": (1.0, 1.0), "im_shape": (128.0, 128.0), "scale": (1.0,)},
            r"names 'scale', which the model does not have; its inputs: image",
        ),
        ({"scale_factor": (1.0, 1.0)}, r"one input must be the image, but 2 inputs are not in model.inputs \('image', 'im_shape'\)"),
        ({"scale_factor": (1.0, 1.0, 1.0), "im_shape": (128.0,)}, r"model.inputs.scale_factor: 3 value\(s\) for an input of shape \[1, 2\]"),
        ({"scale_factor": (1.0,), "im_shape": (128.5, 128.0)}, r"model.inputs.im_shape: \[128.5, 128.0\] for a int64 input; allowed: whole numbers"),
    ],
)
def test_constants_that_do_not_fit_the_model_are_refused_naming_the_key(tmp_path, constants, message):
    _, model = wrapped_blazeface(tmp_path)
    with OnnxRuntimeBackend(model) as backend, pytest.raises(ModelError, match=message):
        split_inputs(backend, constants, model)


def _pipeline(extra: str) -> str:
    text = PIPELINE.replace("  path: blazeface.onnx\n", "  path: blazeface_constants.onnx\n" + extra)
    text = text.replace("  normalize: {scale: 0.00784313725490196, mean: [1.0, 1.0, 1.0]}   # x / 127.5 - 1, as MediaPipe feeds BlazeFace\n", "")
    return text.replace("  dtype: float32\n", "  dtype: uint8   # raw pixels: the graph normalises\n")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("[]", "holds no value"),
        ("[[1, 2]]", "is nested"),
        ("{a: 1}", "a mapping is not a value"),
        ("[.inf]", "not a finite number"),
        ("2e10", "out of range"),
    ],
)
def test_bad_values_are_one_error_line_at_load(tmp_path, value, message):
    (tmp_path / "p.yaml").write_text(_pipeline(f"  inputs: {{scale_factor: {value}}}\n"))
    with pytest.raises(ConfigError, match=rf"model\.inputs\.scale_factor.*{message}"):
        load_pipeline(tmp_path / "p.yaml", check_files=False)


def test_prepare_names_the_image_and_the_constants(tmp_path):
    prepare = "  prepare: {inputs: {image: [1, 128, 128, 3], im_shape: [1, 2], scale_factor: [1, 2]}, outputs: [regressors, classificators]}\n"
    (tmp_path / "p.yaml").write_text(_pipeline("  inputs: {scale_factor: [1, 1], im_shape: [128, 128]}\n" + prepare))
    assert load_pipeline(tmp_path / "p.yaml", check_files=False).spec.model.inputs["im_shape"] == (128.0, 128.0)
    (tmp_path / "p.yaml").write_text(_pipeline("  inputs: {scale_factor: [1, 1]}\n" + prepare))
    with pytest.raises(ConfigError, match=r"exactly one of them must be the image"):
        load_pipeline(tmp_path / "p.yaml", check_files=False)


@pytest.mark.slow
def test_the_wrapped_real_model_with_uint8_nhwc_and_two_constants_matches_the_reference_through_deploy_local(tmp_path):
    folder = tmp_path / "p"
    (folder / "frames").mkdir(parents=True)
    joined, _ = wrapped_blazeface(folder)
    frames = portrait_frames(cv2.imread(str(ASSETS / "astronaut_256.jpg")), 8)
    for i, frame in enumerate(frames):
        cv2.imwrite(str(folder / "frames" / f"{i:03d}.png"), frame)
    (folder / "p.yaml").write_text(_pipeline("  inputs:\n    scale_factor: [1.0, 1.0]\n    im_shape: [128, 128]\n"))
    lines = deploy_local(folder / "p.yaml", 8, tmp_path / "state", tmp_path / "reports")
    session = ort.InferenceSession(str(joined), providers=["CPUExecutionProvider"])  # the reference runs the unwrapped model
    stats = compare(frames, lines, session, reference_anchors(), NAMES, band=0.01)
    assert stats["matched"] >= 8 and stats["recall"] >= 0.97 and stats["precision"] >= 0.97, stats
    assert stats["score"] <= 0.01 and stats["box"] <= 1.0, stats
