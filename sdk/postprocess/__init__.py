"""Decoding: one decoder kind per module, chosen by `postprocess.decoder.kind` through the registry below; boxes in
source-image pixels. Detection decoders run the SDK's NMS, except `nms_inside` (the model's own NMS)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from sdk.postprocess.detections import Detection, Detections
from sdk.spec.schema import GeneratedAnchors, Postprocess


def _ssd(spec: Postprocess, outputs, net_size, tensors, classes):
    from sdk.anchors import from_corners, generate
    from sdk.errors import ModelError
    from sdk.postprocess.ssd import SsdPostprocessor

    anchors = spec.decoder.anchors
    if isinstance(anchors, GeneratedAnchors):
        return SsdPostprocessor(spec, generate(anchors.generate), outputs, net_size)
    if anchors not in tensors:
        raise ModelError(
            f"postprocess.decoder.anchors: tensor {anchors!r} was not extracted from the model",
            hint="run `sdk prepare PIPELINE`; the anchors must be a constant tensor of the original graph",
        )
    return SsdPostprocessor(spec, from_corners(tensors[anchors], spec.decoder.anchor_layout), outputs, net_size)


def _yolo(spec: Postprocess, outputs, net_size, tensors, classes):
    from sdk.postprocess.yolo import YoloPostprocessor

    return YoloPostprocessor(spec, outputs, net_size)


def _nms_inside(spec: Postprocess, outputs, net_size, tensors, classes):
    from sdk.postprocess.nms_inside import NmsInsidePostprocessor

    return NmsInsidePostprocessor(spec, outputs, net_size)


def _classify(spec: Postprocess, outputs, net_size, tensors, classes):
    from sdk.postprocess.classify import ClassifyPostprocessor

    return ClassifyPostprocessor(spec, outputs, classes)


def _python(spec: Postprocess, outputs, net_size, tensors, classes, plugin_folder=None):
    from sdk.postprocess.plugin import PluginPostprocessor  # a user's function; plugin_folder: its decoder.path, resolved

    return PluginPostprocessor(spec, outputs, plugin_folder)


def _segment(spec: Postprocess, outputs, net_size, tensors, classes):
    from sdk.postprocess.segment import SegmentPostprocessor

    return SegmentPostprocessor(spec, outputs, classes)


def _db(spec: Postprocess, outputs, net_size, tensors, classes):
    from sdk.postprocess.db import DbPostprocessor

    return DbPostprocessor(spec, outputs)


# decoder kind -> factory(spec, outputs, net_size, tensors, classes): the one place a kind is bound to its module.
DECODERS: dict[str, Callable] = {
    "ssd": _ssd,
    "yolo": _yolo,
    "nms_inside": _nms_inside,
    "classify": _classify,
    "segment": _segment,
    "db": _db,
    "python": _python,
}


def create_postprocessor(
    spec: Postprocess,
    outputs: dict[str, np.ndarray],
    net_size: tuple[int, int],
    tensors: dict[str, np.ndarray],
    classes: tuple[str, ...] | None = None,
    *,
    session=None,
    plugin_folder=None,
    slot: int = 0,
):
    """The decoder the pipeline names, bound to the backend's output buffers. `classes`: the names a label file holds
    (PipelineFile.class_names()); postprocess.classes where not given. With a CUDA `session` (the CUDA
    preprocessor's), the decode kernel runs on the engine's outputs in place where it knows the head
    (sdk/postprocess/device.py); NMS stays here. `slot`: the batch slot `outputs` are views of (several cameras)."""
    kind = spec.decoder.kind
    extra = {"plugin_folder": plugin_folder} if kind == "python" else {}
    cpu = DECODERS[kind](spec, outputs, net_size, tensors, classes or spec.classes, **extra)
    if session is None:
        return cpu
    from sdk.postprocess.device import device_decoder

    return device_decoder(spec, cpu, outputs, tensors, net_size, session, slot=slot)


def describe(postprocessor) -> str:
    """What decoded the frames and where NMS ran, for the report."""
    describe = getattr(postprocessor, "describe", None)
    return describe() if describe is not None else type(postprocessor).__name__


__all__ = ["DECODERS", "Detection", "Detections", "create_postprocessor", "describe"]
