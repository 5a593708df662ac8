"""The SSD decode kernel's per-anchor code (host build) against the CPU decoder, on the real detector's outputs."""

from __future__ import annotations

import ctypes

import cv2
import numpy as np
import pytest

from sdk.backends import create_backend
from sdk.gpu.decode import SsdDecodePlan, SsdParams
from sdk.postprocess import create_postprocessor
from sdk.postprocess.detections import Detections
from sdk.preprocess import CpuPreprocessor

from .helpers import host_decode


@pytest.fixture(scope="module")
def detector_outputs(example_pipeline, prepared_example, video_path):
    """(geometry, encodings, logits) of real frames through the prepared detector."""
    spec = example_pipeline.spec
    capture = cv2.VideoCapture(str(video_path))
    results = []
    with create_backend("onnxruntime", prepared_example.model_path) as backend:
        (buffer,) = backend.inputs.values()
        pre = CpuPreprocessor(spec.preprocess, buffer)
        for index in range(160):
            ok, bgr = capture.read()
            assert ok
            if index in (0, 100, 156):
                geometry = pre(bgr)
                backend.infer()
                results.append((geometry, {name: array.copy() for name, array in backend.outputs.items()}))
    capture.release()
    return results


def test_parameter_block_size_is_the_compilers(reference):
    reference.lib.ssd_params_size.restype = ctypes.c_uint
    assert reference.lib.ssd_params_size() == ctypes.sizeof(SsdParams) == 112


@pytest.mark.parametrize("threshold", [0.3, 0.05])
def test_decode_then_nms_gives_the_cpu_decoders_detections(reference, example_pipeline, prepared_example, detector_outputs, threshold):
    spec = example_pipeline.spec.postprocess.model_copy(update={"score_threshold": threshold})
    decoder = spec.decoder
    anchors = prepared_example.load_tensors()[decoder.anchors]
    compared = 0
    for geometry, outputs in detector_outputs:
        cpu = create_postprocessor(spec, outputs, (300, 300), {decoder.anchors: anchors})(geometry)
        logits = outputs[decoder.class_logits].reshape(anchors.reshape(-1, 4).shape[0], -1)
        plan = SsdDecodePlan.build(spec, anchors, logits.shape[1], (300, 300))
        boxes, scores, classes, found = host_decode(reference, plan, outputs[decoder.box_encodings], logits)
        assert found <= plan.capacity
        # The candidates themselves: exactly the anchors whose logit passes, as the CPU decoder selects them.
        first = 1 if decoder.background_class else 0
        assert found == int((logits[:, first:] > np.log(threshold / (1 - threshold))).sum())
        ours = Detections(spec.max_detections, spec.classes).select(boxes.copy(), scores, classes, spec.iou_threshold, geometry)
        assert len(ours) == len(cpu) > 0
        assert np.allclose(ours.scores[: len(ours)], cpu.scores[: len(cpu)], rtol=1e-6, atol=1e-7)
        assert np.abs(ours.boxes[: len(ours)] - cpu.boxes[: len(cpu)]).max() <= 1e-3  # source pixels
        assert (ours.class_ids[: len(ours)] == cpu.class_ids[: len(cpu)]).all()
        compared += len(cpu)
    assert compared >= 5


def test_softmax_and_overflow(reference, example_pipeline, prepared_example, detector_outputs):
    """Softmax scores (one class + background) and a full candidate list: counted past capacity, stored up to it."""
    spec = example_pipeline.spec.postprocess
    spec = spec.model_copy(update={"score_threshold": 1e-5, "decoder": spec.decoder.model_copy(update={"score_activation": "softmax"})})
    decoder = spec.decoder
    anchors = prepared_example.load_tensors()[decoder.anchors]
    geometry, outputs = detector_outputs[1]
    logits = outputs[decoder.class_logits].reshape(anchors.reshape(-1, 4).shape[0], -1)
    shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
    probability = (shifted / shifted.sum(axis=1, keepdims=True))[:, 1]
    full = SsdDecodePlan.build(spec, anchors, logits.shape[1], (300, 300))
    boxes, scores, classes, found = host_decode(reference, full, outputs[decoder.box_encodings], logits)
    assert found == int((probability > 1e-5).sum()) > 50
    assert np.allclose(np.sort(scores), np.sort(probability[probability > 1e-5]), rtol=1e-5)
    small = SsdDecodePlan.build(spec, anchors, logits.shape[1], (300, 300), capacity=16)
    boxes, scores, classes, found_small = host_decode(reference, small, outputs[decoder.box_encodings], logits)
    assert found_small == found and len(scores) == 16


def test_launch_covers_every_anchor(example_pipeline, prepared_example):
    spec = example_pipeline.spec.postprocess
    anchors = prepared_example.load_tensors()[spec.decoder.anchors]
    plan = SsdDecodePlan.build(spec, anchors, 2, (300, 300))
    count = plan.params.count
    assert count == 1917 and plan.grid[0] * plan.block[0] >= count > (plan.grid[0] - 1) * plan.block[0]
