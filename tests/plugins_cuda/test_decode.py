"""The decode kernels' per-row code (host build) against the CPU decoders: SSD on the real detector's outputs,
YOLO on outputs of the v8/v5 shapes (no YOLO model among the assets), both at the score threshold's edge."""

from __future__ import annotations

import ctypes

import cv2
import numpy as np
import pytest

from sdk.backends import create_backend
from sdk.gpu.decode import SsdDecodePlan, SsdParams, YoloDecodePlan, YoloParams
from sdk.postprocess import create_postprocessor
from sdk.postprocess.detections import Detections
from sdk.preprocess import CpuPreprocessor, ResizeGeometry
from sdk.spec.schema import Postprocess, Resize

from .helpers import host_decode, host_yolo, yolo_outputs


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


def test_parameter_block_sizes_are_the_compilers(reference):
    reference.lib.ssd_params_size.restype = ctypes.c_uint
    reference.lib.yolo_params_size.restype = ctypes.c_uint
    assert reference.lib.ssd_params_size() == ctypes.sizeof(SsdParams) == 112
    assert reference.lib.yolo_params_size() == ctypes.sizeof(YoloParams) == 72


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


def test_ssd_threshold_edge_is_numpys(reference, example_pipeline, prepared_example):
    """Logits exactly at float32(logit(t)) are out, the next float up is in: numpy compares in float32."""
    spec = example_pipeline.spec.postprocess
    anchors = prepared_example.load_tensors()[spec.decoder.anchors]
    count = anchors.reshape(-1, 4).shape[0]
    edge = np.float32(np.log(spec.score_threshold / (1 - spec.score_threshold)))
    logits = np.random.default_rng(5).normal(-4, 2, (count, 2)).astype(np.float32)
    logits[:300, 1] = edge
    logits[300:600, 1] = np.nextafter(edge, np.float32(np.inf))
    logits[600:900, 1] = np.nextafter(edge, np.float32(-np.inf))
    encodings = np.random.default_rng(6).normal(0, 0.5, (count, 4)).astype(np.float32)
    plan = SsdDecodePlan.build(spec, anchors, 2, (300, 300))
    _, _, _, found = host_decode(reference, plan, encodings, logits)
    assert found == int((logits[:, 1] > float(np.log(spec.score_threshold / (1 - spec.score_threshold)))).sum())
    assert found >= 300


@pytest.mark.parametrize("layout", ["v5", "v8"])
def test_yolo_decode_then_nms_is_the_cpu_decoder_bit_for_bit(reference, layout):
    classes = tuple(f"c{i}" for i in range(80))
    spec = Postprocess(decoder={"kind": "yolo", "output": "out", "layout": layout}, classes=classes, score_threshold=0.25, max_detections=300)
    output = yolo_outputs(layout)
    geometry = ResizeGeometry.plan(1280, 720, Resize(width=640, height=640, mode="letterbox"))
    cpu = create_postprocessor(spec, {"out": output}, (640, 640), {})(geometry)
    plan = YoloDecodePlan.build(spec, output.shape)
    boxes, scores, classes_found, found = host_yolo(reference, plan, output)
    ours = Detections(spec.max_detections, spec.classes).select(boxes.copy(), scores, classes_found, spec.iou_threshold, geometry)
    assert 100 < len(cpu) == len(ours)
    n = len(cpu)
    assert (ours.scores[:n] == cpu.scores[:n]).all() and (ours.boxes[:n] == cpu.boxes[:n]).all()
    assert (ours.class_ids[:n] == cpu.class_ids[:n]).all()
    assert plan.grid[0] * plan.block[0] >= 8400 > (plan.grid[0] - 1) * plan.block[0]
