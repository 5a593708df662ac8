"""Decoding on the device: the decode kernel thresholds and compacts candidates, only they come back.

Produced by `create_postprocessor(..., session=...)` when the preprocessing runs on CUDA. The kernel
(plugins_cuda/include/ssd_decode.cuh) reads the engine's output bindings in place, claims a slot per
candidate in a fixed-capacity list and counts every candidate, stored or not; the count comes back
first, then only that many boxes, scores and classes. A count above the capacity is an overflow:
counted per frame and in total (the report's preprocess.decode), never silent. NMS and the mapping to
source pixels are the CPU decoders' own (Detections.select).
"""

from __future__ import annotations

import numpy as np

from sdk.geometry import ResizeGeometry
from sdk.postprocess.detections import Detections
from sdk.stage import Stage

DEFAULT_CAPACITY = 4096


def device_decoder(
    spec,
    cpu_decoder,
    outputs: dict[str, np.ndarray],
    tensors: dict[str, np.ndarray],
    net_size,
    session,
    capacity: int = DEFAULT_CAPACITY,
    slot: int = 0,
):
    """The decode-on-device stage for `cpu_decoder`'s head (already validated by it), or the CPU decoder
    itself where the kernels do not decode this head (the reason goes into the report). `outputs`: this
    slot's views of the engine's outputs; `slot`: the batch slot they are (the kernel reads the binding
    from slot x the views' bytes on)."""
    from sdk.gpu.decode import SsdDecodePlan, YoloDecodePlan
    from sdk.spec.schema import GeneratedAnchors, SsdDecoder

    decoder = spec.decoder
    if isinstance(decoder, SsdDecoder):
        if isinstance(decoder.anchors, GeneratedAnchors) or (decoder.box_layout, decoder.box_size, decoder.keypoints) != ("yxhw", "exp", 0):
            session.decode_on_cpu = "the CUDA SSD decoder knows TF's box coding only (yxhw, exp, no keypoints, anchors from the model)"
            return cpu_decoder
        anchors = tensors[decoder.anchors]
        count = anchors.reshape(-1, 4).shape[0]
        if outputs[decoder.box_encodings].size != 4 * count:
            session.decode_on_cpu = f"{decoder.box_encodings!r} holds more than 4 values per anchor"
            return cpu_decoder
        classes = outputs[decoder.class_logits].size // count
        plan = SsdDecodePlan.build(spec, anchors, classes, net_size, capacity)
        bindings = {"encodings": decoder.box_encodings, "logits": decoder.class_logits}
    else:
        plan = YoloDecodePlan.build(spec, tuple(outputs[decoder.output].shape), capacity)
        bindings = {"rows": decoder.output}
    offsets = {tensor: slot * outputs[tensor].nbytes for tensor in bindings.values()}
    return DeviceDecoder(spec, plan, session, bindings, offsets)


class DeviceDecoder(Stage):
    name = "postprocess"

    def __init__(self, spec, plan, session, bindings: dict[str, str], offsets: dict[str, int] | None = None) -> None:
        self.spec, self.plan, self.session = spec, plan, session
        gpu = session.gpu
        self.capacity = plan.capacity
        self.host = plan.output_buffers()
        if session.graph is not None:  # a captured copy needs pinned host memory: the candidates land there
            self.host = {name: _pinned_like(gpu, array) for name, array in self.host.items()}
        self._device = {name: gpu.device_buffer(array.nbytes) for name, array in self.host.items()}
        offsets = offsets or {}
        # by name, whatever the engine's order; a batch slot's part of the binding with several cameras
        inputs = {param: session.binding(tensor) + offsets.get(tensor, 0) for param, tensor in bindings.items()}
        outs = (self._device["boxes"], self._device["scores"], self._device["classes"], self._device["count"])
        if plan.kernel == "ssd_decode":
            anchors = gpu.device_buffer(plan.anchors.nbytes)
            gpu.upload(anchors, plan.anchors)  # once: constants of the model
            self._params = plan.bound(inputs["encodings"], inputs["logits"], anchors, *outs)
        else:
            self._params = plan.bound(inputs["rows"], *outs)
        self._function = gpu.function(plan.kernel)
        self.detections = Detections(spec.max_detections, spec.classes, class_agnostic=spec.class_agnostic)
        self.overflow_frames = 0
        self.candidates_lost = 0
        self.most_candidates = 0
        session.add_decoder(self)  # its report and its part of the frame (the graph's decode step)

    def report(self) -> dict:
        return {
            "device": "cuda",
            "kernel": self.plan.kernel,
            "capacity": self.capacity,
            "most_candidates": self.most_candidates,
            "overflow_frames": self.overflow_frames,
            "candidates_lost": self.candidates_lost,
        }

    def enqueue(self) -> None:
        """The decode's part of the captured frame: no wait inside a graph, so the count and the whole candidate
        buffers come back (capacity x 24 bytes), and the host reads the first `count` of them."""
        gpu, times, host, device = self.session.gpu, self.session.times, self.host, self._device
        times.mark("decode_start")
        gpu.memset32(device["count"], 0, 1)
        gpu.enqueue(self._function, self.plan.grid, self.plan.block, self._params)
        for name in ("count", "boxes", "scores", "classes"):
            gpu.download(host[name], device[name])
        times.mark("decode_end")

    def __call__(self, geometry: ResizeGeometry) -> Detections:
        gpu, times, host, device = self.session.gpu, self.session.times, self.host, self._device
        if self.session.frame.replayed:  # this frame ran as the captured graph: wait for it, its stage times from its events
            self.session.replayed_frame_done()
            return self._finish(geometry, timed=True)
        times.mark("decode_start")
        gpu.memset32(device["count"], 0, 1)
        gpu.enqueue(self._function, self.plan.grid, self.plan.block, self._params)
        gpu.download(host["count"], device["count"])
        gpu.synchronize()  # the count decides how much comes back
        found = int(host["count"][0])
        n = min(found, self.capacity)
        if n:
            for name in ("boxes", "scores", "classes"):
                gpu.download(host[name][:n], device[name])
        times.mark("decode_end")
        return self._finish(geometry)

    def _finish(self, geometry: ResizeGeometry, timed: bool = False) -> Detections:
        times, host = self.session.times, self.host
        if not timed:
            self.session.read_engine_time()  # the batch's first slot: the engine's time (later slots decode after it)
            times.add("decode")  # waits for decode_end: the candidates are on the host after it
        found = int(host["count"][0])
        n = min(found, self.capacity)
        self.most_candidates = max(self.most_candidates, found)
        if found > self.capacity:
            self.overflow_frames += 1
            self.candidates_lost += found - self.capacity
        return self.detections.select(host["boxes"][:n], host["scores"][:n], host["classes"][:n], self.spec.iou_threshold, geometry)


def _pinned_like(gpu, array: np.ndarray) -> np.ndarray:
    raw, _ = gpu.pinned_buffer(array.nbytes, False)
    return raw.view(array.dtype).reshape(array.shape)
