"""Decoding and NMS: SSD and YOLO heads, boxes returned in source-image pixels."""

from __future__ import annotations

import numpy as np

from sdk.postprocess.detections import Detection, Detections
from sdk.spec.schema import GeneratedAnchors, Postprocess, SsdDecoder


def create_postprocessor(
    spec: Postprocess, outputs: dict[str, np.ndarray], net_size: tuple[int, int], tensors: dict[str, np.ndarray], plugin_folder=None
):
    """The decoder the pipeline names, bound to the backend's output buffers."""
    if spec.decoder.kind == "python":  # a user's function (sdk.postprocess.plugin); plugin_folder: its decoder.path, resolved
        from sdk.postprocess.plugin import PluginPostprocessor

        return PluginPostprocessor(spec, outputs, plugin_folder)
    if isinstance(spec.decoder, SsdDecoder):
        from sdk.errors import ModelError
        from sdk.postprocess.anchors import from_corners, generate
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
    from sdk.postprocess.yolo import YoloPostprocessor

    return YoloPostprocessor(spec, outputs)


__all__ = ["Detection", "Detections", "create_postprocessor"]
