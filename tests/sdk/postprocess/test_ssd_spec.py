"""The SSD decoder's settings at load: a BlazeFace-style file loads; every bad `anchors.generate` option, and every
misuse around it, is one error line naming the file's line, the YAML path, the value and what is allowed, plus a hint."""

from __future__ import annotations

from pathlib import Path

import pytest

from sdk.errors import ConfigError
from sdk.spec import load_pipeline
from sdk.spec.schema import GeneratedAnchors

FACES = """\
version: 1
name: faces
source:
  uri: file://clip.avi
preprocess:
  resize: {width: 128, height: 128, mode: letterbox, pad_value: 0}
  normalize: {scale: 0.00784313725490196, mean: [1.0, 1.0, 1.0]}
  layout: nhwc
model:
  path: face.onnx
postprocess:
  decoder:
    kind: ssd
    box_encodings: regressors
    class_logits: classificators
    anchors:
      generate:
        num_layers: 4
        min_scale: 0.1484375
        max_scale: 0.75
        input_size_width: 128
        input_size_height: 128
        anchor_offset_x: 0.5
        anchor_offset_y: 0.5
        strides: [8, 16, 16, 16]
        aspect_ratios: [1.0]
        fixed_anchor_size: true
        interpolated_scale_aspect_ratio: 1.0
        reduce_boxes_in_lowest_layer: false
    box_layout: xywh
    box_size: linear
    scale_factors: [128, 128, 128, 128]
    keypoints: 6
    background_class: false
  classes: [face]
  score_threshold: 0.5
  iou_threshold: 0.3
"""

# (edit: old -> new, the line's marker, YAML path, what the value is said to be, what is allowed)
BAD = {
    "num_layers-zero": ("num_layers: 4", "num_layers: 0", "num_layers:", "generate.num_layers", "0 is out of range", "an integer from 1 to 64"),
    "num_layers-fraction": ("num_layers: 4", "num_layers: 4.5", "num_layers:", "generate.num_layers", "4.5 is not a whole number", "from 1 to 64"),
    "min_scale-negative": ("min_scale: 0.1484375", "min_scale: -1", "min_scale:", "generate.min_scale", "-1 is out of range", "above 0"),
    "min_scale-text": ("min_scale: 0.1484375", "min_scale: small", "min_scale:", "generate.min_scale", "'small' is not a number", "above 0"),
    "max_scale-below-min": (
        "max_scale: 0.75",
        "max_scale: 0.1",
        "max_scale:",
        "generate.max_scale",
        "0.1 is below min_scale 0.1484375",
        "from 0.1484375",
    ),
    "max_scale-inf": ("max_scale: 0.75", "max_scale: .inf", "max_scale:", "generate.max_scale", ".inf is not a finite number", "at most 100"),
    "input_size_width-zero": ("input_size_width: 128", "input_size_width: 0", "input_size_width:", "generate.input_size_width", "0 is out", "from 1"),
    "input_size_width-not-the-input": (
        "input_size_width: 128",
        "input_size_width: 192",
        "input_size_width:",
        "generate.input_size_width",
        "192 differs from preprocess.resize.width 128",
        "allowed: the model's input width, the same in both",
    ),
    "input_size_height-not-the-input": (
        "input_size_height: 128",
        "input_size_height: 256",
        "input_size_height:",
        "generate.input_size_height",
        "256 differs from preprocess.resize.height 128",
        "allowed: the model's input height, the same in both",
    ),
    "anchor_offset_x-above-1": (
        "anchor_offset_x: 0.5",
        "anchor_offset_x: 1.5",
        "anchor_offset_x:",
        "generate.anchor_offset_x",
        "1.5 is out",
        "from 0 to 1",
    ),
    "anchor_offset_y-boolean": (
        "anchor_offset_y: 0.5",
        "anchor_offset_y: true",
        "anchor_offset_y:",
        "generate.anchor_offset_y",
        "true is a boolean",
        "from 0 to 1",
    ),
    "strides-count": (
        "strides: [8, 16, 16, 16]",
        "strides: [8, 16, 16]",
        "strides:",
        "generate.strides",
        "3 stride(s) [8, 16, 16] for num_layers 4",
        "exactly 4",
    ),
    "strides-zero": ("strides: [8, 16, 16, 16]", "strides: [8, 16, 0, 16]", "strides:", "generate.strides[2]", "0 is out of range", "from 1 to 8192"),
    "strides-too-many-anchors": (
        "strides: [8, 16, 16, 16]",
        "strides: [1, 1, 1, 1]",
        "strides:",
        "generate.strides",
        "[1, 1, 1, 1] on 512x512 would generate 2097152 anchors",  # 512 x 512 cells x 4 layers x 2 anchors
        "at most 1000000 anchors",
    ),
    "aspect_ratios-zero": (
        "aspect_ratios: [1.0]",
        "aspect_ratios: [1.0, 0]",
        "aspect_ratios:",
        "generate.aspect_ratios[1]",
        "0 is out of range",
        "above 0",
    ),
    "aspect_ratios-nan": (
        "aspect_ratios: [1.0]",
        "aspect_ratios: [.nan]",
        "aspect_ratios:",
        "generate.aspect_ratios[0]",
        ".nan is not a finite",
        "above 0",
    ),
    "no-anchor-at-all": (
        "aspect_ratios: [1.0]",
        "aspect_ratios: []",
        "aspect_ratios:",
        "generate.aspect_ratios",
        "[] with interpolated_scale_aspect_ratio 0 places no anchor",
        "at least one aspect ratio",
    ),
    "fixed_anchor_size-text": (
        "fixed_anchor_size: true",
        "fixed_anchor_size: yes please",
        "fixed_anchor_size:",
        "generate.fixed_anchor_size",
        "'yes please' is not a boolean",
        "true or false",
    ),
    "interpolated-negative": (
        "interpolated_scale_aspect_ratio: 1.0",
        "interpolated_scale_aspect_ratio: -1",
        "interpolated_scale_aspect_ratio:",
        "generate.interpolated_scale_aspect_ratio",
        "-1 is out of range",
        "from 0 to 1000",
    ),
    "reduce-number": (
        "reduce_boxes_in_lowest_layer: false",
        "reduce_boxes_in_lowest_layer: 1",
        "reduce_boxes_in_lowest_layer:",
        "generate.reduce_boxes_in_lowest_layer",
        "1 is not a boolean",
        "true or false",
    ),
    "anchors-not-generate": (
        "      generate:\n",
        "      generat:\n",
        "generat:",
        "postprocess.decoder.anchors",
        "a mapping of generat without `generate`",
        "or {generate: {...}}",
    ),
    "anchors-a-number": (
        FACES[FACES.index("    anchors:\n") : FACES.index("    box_layout:")],
        "    anchors: 5\n",
        "anchors: 5",
        "postprocess.decoder.anchors",
        "5 is neither a tensor name nor a mapping",
        "the name of a constant tensor",
    ),
    "anchor_layout-with-generate": (
        "    box_layout: xywh\n",
        "    box_layout: xywh\n    anchor_layout: yxyx\n",
        "anchor_layout:",
        "postprocess.decoder.anchor_layout",
        "yxyx describes the corners of an anchor tensor",
        "only with anchors naming a tensor",
    ),
    "keypoints-negative": ("keypoints: 6", "keypoints: -1", "keypoints:", "postprocess.decoder.keypoints", "-1 is out of range", "from 0 to 64"),
    "scale-zero": (
        "scale_factors: [128, 128, 128, 128]",
        "scale_factors: [128, 0, 128, 128]",
        "scale_factors:",
        "decoder.scale_factors[1]",
        "0 is out",
        "above 0",
    ),
}


@pytest.fixture()
def folder(tmp_path: Path) -> Path:
    for name in ("clip.avi", "face.onnx"):
        (tmp_path / name).write_bytes(b"stand-in: the loader only checks that files exist")
    return tmp_path


def line_of(text: str, marker: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if marker in line)


def test_a_blazeface_style_decoder_loads(folder):
    (folder / "p.yaml").write_text(FACES)
    decoder = load_pipeline(folder / "p.yaml").spec.postprocess.decoder
    assert isinstance(decoder.anchors, GeneratedAnchors) and decoder.anchors.generate.anchor_count == 896
    assert (decoder.box_layout, decoder.box_size, decoder.keypoints, decoder.scale_factors) == ("xywh", "linear", 6, (128.0,) * 4)


def test_the_example_keeps_its_tensor_anchors_and_tf_coding():
    decoder = load_pipeline(Path(__file__).resolve().parents[3] / "pipelines" / "pedestrian.yaml").spec.postprocess.decoder
    assert decoder.anchors == "Postprocessor/ExpandDims:0"
    assert (decoder.box_layout, decoder.box_size, decoder.keypoints) == ("yxhw", "exp", 0)


@pytest.mark.parametrize("case", BAD, ids=list(BAD))
def test_each_bad_option_is_one_line_naming_line_path_value_and_what_is_allowed(folder, case):
    old, new, marker, yaml_path, value, allowed = BAD[case]
    assert old in FACES, old
    text = FACES.replace(old, new, 1)
    if case == "no-anchor-at-all":
        text = text.replace("interpolated_scale_aspect_ratio: 1.0", "interpolated_scale_aspect_ratio: 0")
    if case == "strides-too-many-anchors":
        text = text.replace("128", "512")
    path = folder / "p.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_pipeline(path)
    error = info.value
    assert "\n" not in error.message and error.hint and "\n" not in error.hint
    where = f"p.yaml:{line_of(text, marker)}: "
    assert where in error.message and (yaml_path in error.message.split(": ")[1]), error.message
    assert value in error.message and "allowed: " in error.message and allowed in error.message, error.message
    assert "more problem" not in error.message, error.message


def test_a_misspelt_option_says_which_was_meant(folder):
    path = folder / "p.yaml"
    path.write_text(FACES.replace("min_scale: 0.1484375", "min_scal: 0.1484375"))
    with pytest.raises(ConfigError) as info:
        load_pipeline(path)
    message = info.value.message
    assert "postprocess.decoder.anchors.generate.min_scal: unknown key 'min_scal'; did you mean 'min_scale'?" in message
    assert "allowed here: num_layers, min_scale, max_scale" in message


def test_through_the_cli_a_bad_option_is_an_error_line_and_a_hint_line_and_nothing_is_deployed(folder):
    import os
    import subprocess
    import sys

    bad = folder / "p.yaml"
    bad.write_text(FACES.replace("strides: [8, 16, 16, 16]", "strides: [8, 16, 16]"))
    state = folder / "state"
    env = {**os.environ, "SDK_STATE_DIR": str(state), "PYTHONPATH": str(Path(__file__).resolve().parents[3]), "COLUMNS": "400"}
    env.pop("SDK_DEBUG", None)
    done = subprocess.run(
        [sys.executable, "-c", "from tools.cli import main; main()", "deploy", "--target", "local", str(bad)],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stderr
    lines = done.stderr.splitlines()
    assert [line.split(":")[0] for line in lines] == ["error", "hint"], done.stderr
    assert f"{bad}:{line_of(FACES, 'strides:')}: postprocess.decoder.anchors.generate.strides: 3 stride(s) [8, 16, 16]" in lines[0]
    assert "SsdAnchorsCalculator" in lines[1]
    assert not (state / "targets").exists()
