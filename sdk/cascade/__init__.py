"""The cascade stage: each step crops the first model's detections, runs its model on the crops of a frame as one
batch (where the model's batch dimension is free; else one crop at a time), decodes (`classify`, `ctc`: decoders.py;
`ssd`: ssd.py, boxes mapped back through each crop's geometry), and attaches its result to the parent detection
(`Detections.secondary`, written by the JSONL sink). Per-step latency is kept for the report.

Lifecycle as every stage: built (sessions loaded, buffers allocated for `max_per_frame` crops), called once a frame
`(image, detections) -> detections`, closed.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from sdk.cascade.decoders import Classify, Ctc
from sdk.errors import ModelError
from sdk.postprocess.detections import Detections
from sdk.spec.cascade import CascadeSsdDecoder, CascadeStep, CtcDecoder
from sdk.spec.paths import confined_path
from sdk.stage import Stage


def crop_rect(box, crop, width: int, height: int) -> tuple[int, int, int, int] | None:
    """x1, y1, x2, y2 (integers, inside the frame) of a detection's crop, or None when the box is below min_size."""
    x1, y1, x2, y2 = box
    w, h = x2 - x1, y2 - y1
    if w < crop.min_size or h < crop.min_size:
        return None
    if crop.square:
        side = max(w, h)
        x1, y1, w, h = x1 - (side - w) / 2, y1 - (side - h) / 2, side, side
    x1, y1 = x1 - crop.padding * w, y1 - crop.padding * h
    x2, y2 = x1 + w * (1 + 2 * crop.padding), y1 + h * (1 + 2 * crop.padding)
    left, top = max(0, int(np.floor(x1))), max(0, int(np.floor(y1)))
    right, bottom = min(width, int(np.ceil(x2))), min(height, int(np.ceil(y2)))
    return (left, top, right, bottom) if right > left and bottom > top else None


class _Step:
    def __init__(self, index: int, spec: CascadeStep, folder: Path, tensors: dict[str, np.ndarray]) -> None:
        from sdk.backends import create_batch_backend
        from sdk.preprocess import CpuPreprocessor

        where = f"cascade[{index}] ({spec.name})"
        path = confined_path(folder, spec.model.path, where=f"{where}.model.path")
        self.session = create_batch_backend(path, threads=spec.model.threads, where=where)
        inputs = self.session.inputs
        if len(inputs) != 1:
            raise ModelError(f"{where}: a cascade model takes one input (the crops), {path.name} has {len(inputs)}")
        (input_name, shape), want = inputs[0], spec.preprocess.tensor_shape
        for axis, (dim, size) in enumerate(zip(shape[1:], want[1:], strict=False), start=1):
            if isinstance(dim, int) and dim != size:
                raise ModelError(
                    f"{where}: the model's input {input_name!r} {shape} has {dim} at axis {axis}, the step's preprocess makes {list(want)}",
                    hint="make the step's preprocess.resize, layout and color match the model's input",
                )
        self.batched = not isinstance(shape[0], int)  # a free batch dimension: the crops of a frame run as one batch
        self.spec, self.name, self.input = spec, spec.name, input_name
        capacity = spec.takes.max_per_frame
        self.buffer = np.zeros((capacity, *want[1:]), np.dtype(spec.preprocess.dtype))
        self.preprocessors = [CpuPreprocessor(spec.preprocess, self.buffer[i : i + 1]) for i in range(capacity)]
        self.fetch: list[str] | None = None  # the outputs the decoder reads; None: the first one
        if isinstance(spec.decoder, CascadeSsdDecoder):
            from sdk.cascade.ssd import CascadeSsd

            net_size = (spec.preprocess.resize.width, spec.preprocess.resize.height)
            self.decoder = CascadeSsd(spec.decoder, spec.name, self.session, capacity, net_size, tensors, where)
            self.fetch = list(self.decoder.names)
        elif isinstance(spec.decoder, CtcDecoder):
            self.decoder = Ctc(spec.decoder, folder, where)
        else:
            self.decoder = Classify(spec.decoder)
        self.latency_ms: list[float] = []

    def __call__(self, image: np.ndarray, detections: Detections, results: list[dict]) -> None:
        started = time.perf_counter()
        takes, height, width = self.spec.takes, image.shape[0], image.shape[1]
        parents, crops, n = [], [], 0
        for i in range(detections.count):  # best first
            if n == len(self.preprocessors):
                break
            label = detections.labels[detections.class_ids[i]] if detections.class_ids[i] < len(detections.labels) else ""
            if detections.scores[i] < takes.min_score or (takes.classes and label not in takes.classes):
                continue
            rect = crop_rect(detections.boxes[i].tolist(), self.spec.crop, width, height)
            if rect is None:
                continue
            x1, y1, x2, y2 = rect
            geometry = self.preprocessors[n](np.ascontiguousarray(image[y1:y2, x1:x2]))
            parents.append(i)
            crops.append((rect, geometry))
            n += 1
        if n:
            if self.batched:
                outputs = self.session.run(self.fetch, {self.input: self.buffer[:n]})
            else:
                runs = [self.session.run(self.fetch, {self.input: self.buffer[k : k + 1]}) for k in range(n)]
                outputs = [np.concatenate(parts) for parts in zip(*runs, strict=True)]
            decoded = self.decoder(outputs, crops) if self.fetch is not None else self.decoder(outputs[0])
            for parent, result in zip(parents, decoded, strict=True):
                results[parent][self.name] = result
        self.latency_ms.append((time.perf_counter() - started) * 1000.0)


class CascadeStage(Stage):
    name = "cascade"

    def __init__(self, steps, folder: Path, tensors: dict[str, np.ndarray] | None = None) -> None:
        """`tensors`: the release's extracted tensors (a step's anchor tensor, under sdk.cascade.ssd.cascade_tensor_key)."""
        self.steps = [_Step(i, spec, Path(folder), tensors or {}) for i, spec in enumerate(steps)]

    def __call__(self, image: np.ndarray, detections: Detections) -> Detections:
        if not self.steps:  # a pipeline without `cascade:` passes the detections through
            return detections
        results: list[dict] = [{} for _ in range(detections.count)]
        if detections.count:
            from sdk.pixels import as_bgr

            image = as_bgr(image)  # an NV12 frame is converted once, only when a step crops from it
        for step in self.steps:
            step(image, detections, results)
        detections.secondary = results
        return detections

    def latencies_ms(self) -> dict[str, list[float]]:
        return {step.name: step.latency_ms for step in self.steps}

    def close(self) -> None:
        for step in self.steps:
            step.session.close()


def create_cascade(steps, folder: Path, tensors: dict[str, np.ndarray] | None = None) -> CascadeStage:
    """The cascade stage of a pipeline's `cascade:` steps; with none, a pass-through."""
    return CascadeStage(tuple(steps or ()), folder, tensors)


__all__ = ["CascadeStage", "create_cascade", "crop_rect"]
