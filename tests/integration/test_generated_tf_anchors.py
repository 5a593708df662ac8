"""The example detector with its anchors generated from options instead of read from its graph: the same detections
on real frames (the options are TF's ssd_anchor_generator for SSDLite-MobileNetV2, in MediaPipe's names)."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from sdk.backends import create_backend
from sdk.postprocess import create_postprocessor
from sdk.preprocess import CpuPreprocessor
from sdk.spec.schema import Postprocess

GENERATE = {
    "num_layers": 6,
    "min_scale": 0.2,
    "max_scale": 0.95,
    "input_size_width": 300,
    "input_size_height": 300,
    "strides": [16, 32, 64, 128, 256, 512],
    "aspect_ratios": [1.0, 2.0, 0.5, 3.0, 0.3333],
    "reduce_boxes_in_lowest_layer": True,
}


@pytest.mark.slow
def test_generated_anchors_give_the_graphs_detections(example_pipeline, prepared_example, video_path):
    spec = example_pipeline.spec
    decoder = spec.postprocess.decoder.model_dump(exclude={"anchors", "anchor_layout"})
    generated = Postprocess(**(spec.postprocess.model_dump(exclude={"decoder"}) | {"decoder": decoder | {"anchors": {"generate": GENERATE}}}))
    capture = cv2.VideoCapture(str(video_path))
    compared = 0
    with create_backend("onnxruntime", prepared_example.model_path) as backend:
        (buffer,) = backend.inputs.values()
        pre = CpuPreprocessor(spec.preprocess, buffer)
        tensors = prepared_example.load_tensors()
        from_graph = create_postprocessor(spec.postprocess, backend.outputs, (300, 300), tensors)
        from_options = create_postprocessor(generated, backend.outputs, (300, 300), {})  # nothing extracted
        for index in range(0, 300):
            ok, bgr = capture.read()
            assert ok
            if index % 10:
                continue
            geometry = pre(bgr)
            backend.infer()
            theirs = [(d.score, d.box) for d in from_graph(geometry)]
            ours = [(d.score, d.box) for d in from_options(geometry)]
            assert [s for s, _ in ours] == [s for s, _ in theirs], index
            assert np.allclose([b for _, b in ours], [b for _, b in theirs], atol=1e-3), index
            compared += len(ours)
    capture.release()
    assert compared >= 100, compared
