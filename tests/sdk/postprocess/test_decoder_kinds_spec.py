"""The yolo, nms_inside, classify and segment decoders' settings at load: good files load; each misuse is one error
line naming the YAML path, the value and what is allowed, plus a hint."""

from __future__ import annotations

from pathlib import Path

import pytest

from sdk.errors import ConfigError
from sdk.spec import load_pipeline

HEAD = """\
version: 1
name: kinds
source: {uri: "file://clip.avi"}
preprocess:
  resize: {width: 96, height: 64, mode: letterbox}
  layout: nchw
model: {path: m.onnx}
"""


@pytest.fixture()
def folder(tmp_path: Path) -> Path:
    for name in ("clip.avi", "m.onnx"):
        (tmp_path / name).write_bytes(b"stand-in: the loader only checks that files exist")
    return tmp_path


def load(folder: Path, postprocess: str, sinks: str = ""):
    path = folder / "p.yaml"
    path.write_text(HEAD + postprocess + sinks)
    return load_pipeline(path)


GOOD = {
    "yolox": "postprocess:\n  decoder: {kind: yolo, output: out, layout: yolox, strides: [8, 16, 32, 64]}\n  classes: [a]\n",
    "v5-anchors": "postprocess:\n  decoder: {kind: yolo, output: out, layout: v5, anchors: {8: [[10, 13], [16, 30]], 16: [[30, 61]]}}\n"
    "  classes: [a]\n",
    "nms_inside": "postprocess:\n  decoder: {kind: nms_inside, boxes: b, scores: s, classes: c, count: n, box_format: yxyx,"
    " normalized: true, class_offset: 1}\n  classes: [a]\n",
    "classify": "postprocess:\n  decoder: {kind: classify, output: probs, activation: sigmoid, top_k: 3}\n  classes: [a, b, c]\n",
    "segment": "postprocess:\n  decoder: {kind: segment, output: seg}\n  classes: [road, car]\n",
}


@pytest.mark.parametrize("kind", sorted(GOOD))
def test_each_kind_loads(folder, kind):
    decoder = load(folder, GOOD[kind]).spec.postprocess.decoder
    assert decoder.kind == {"yolox": "yolo", "v5-anchors": "yolo"}.get(kind, kind)


def test_anchors_by_stride_are_kept_in_order(folder):
    decoder = load(folder, GOOD["v5-anchors"]).spec.postprocess.decoder
    assert decoder.grid_strides() == (8, 16) and decoder.anchors[8] == ((10.0, 13.0), (16.0, 30.0))


def test_a_label_file_names_the_classes(folder):
    (folder / "labels.txt").write_text("cat\n\n dog \n")
    pipeline = load(folder, "postprocess:\n  decoder: {kind: classify, output: probs, labels: labels.txt}\n")
    assert pipeline.class_names() == ("cat", "dog") and pipeline.labels_file() == folder / "labels.txt"


BAD = {
    "anchors-with-v8": (
        "postprocess:\n  decoder: {kind: yolo, output: out, layout: v8, anchors: {8: [[10, 13]]}}\n  classes: [a]\n",
        "postprocess.decoder.anchors",
        "allowed: anchors only with layout v5",
    ),
    "strides-with-v5": (
        "postprocess:\n  decoder: {kind: yolo, output: out, layout: v5, strides: [8]}\n  classes: [a]\n",
        "postprocess.decoder.strides",
        "allowed: strides only with layout yolox",
    ),
    "stride-zero": (
        "postprocess:\n  decoder: {kind: yolo, output: out, layout: yolox, strides: [0]}\n  classes: [a]\n",
        "strides",
        "an integer from 1 to 8192",
    ),
    "anchor-negative": (
        "postprocess:\n  decoder: {kind: yolo, output: out, layout: v5, anchors: {8: [[-1, 13]]}}\n  classes: [a]\n",
        "anchors",
        "above 0",
    ),
    "top-k-zero": ("postprocess:\n  decoder: {kind: classify, output: p, top_k: 0}\n  classes: [a]\n", "top_k", "an integer from 1 to 1000"),
    "class-offset": (
        "postprocess:\n  decoder: {kind: nms_inside, boxes: b, scores: s, classes: c, class_offset: 5}\n  classes: [a]\n",
        "class_offset",
        "an integer from -1 to 1",
    ),
    "threshold-one": ("postprocess:\n  decoder: {kind: segment, output: s, threshold: 1}\n  classes: [a, b]\n", "threshold", "below 1"),
    "classes-and-labels": (
        "postprocess:\n  decoder: {kind: classify, output: p, labels: l.txt}\n  classes: [a]\n",
        "postprocess",
        "not both",
    ),
    "no-classes": ("postprocess:\n  decoder: {kind: segment, output: s}\n", "postprocess.classes", "required key is missing"),
    "empty-classes": ("postprocess:\n  decoder: {kind: segment, output: s}\n  classes: []\n", "postprocess", "name at least one class"),
    "unknown-kind": ("postprocess:\n  decoder: {kind: detr, output: s}\n  classes: [a]\n", "postprocess.decoder", "detr"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_each_misuse_is_one_line(folder, case):
    text, yaml_path, allowed = BAD[case]
    with pytest.raises(ConfigError) as info:
        load(folder, text)
    error = info.value
    assert "\n" not in error.message and yaml_path in error.message and allowed in error.message, error.message


def test_a_mask_sink_needs_a_segmenter(folder):
    with pytest.raises(ConfigError) as info:
        load(folder, GOOD["classify"], "sinks:\n  - {kind: mask}\n")
    assert "sinks[0].kind" in info.value.message or "sinks" in info.value.message
    assert "allowed: kind: mask only with postprocess.decoder.kind segment" in info.value.message, info.value.message


def test_a_missing_or_empty_label_file_is_refused_at_load(folder):
    with pytest.raises(ConfigError, match="postprocess.decoder.labels: .*labels.txt does not exist"):
        load(folder, "postprocess:\n  decoder: {kind: classify, output: p, labels: labels.txt}\n")
    (folder / "labels.txt").write_text("\n  \n")
    with pytest.raises(ConfigError, match="labels.txt names no class"):
        load(folder, "postprocess:\n  decoder: {kind: classify, output: p, labels: labels.txt}\n")
