"""What a change does to the detections: the pipeline's own decoding, run on a candidate and on the original.

The error that counts is not a layer's but the detector's: `distance` compares two frames' detections the way the
accuracy gate matches them (same class, IoU >= 0.5, best score first) and adds up the score lost on matched pairs
and the whole score of every detection without a partner, per reference detection. `sensitivity` prunes one space
at a time (its probe count, the next layer refitted locally) and measures that distance on a few calibration frames;
allocation scales the space's layer-error curve by it, so layers whose errors never reach a detection are pruned
first and layers every detection depends on last.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from sdk.artifacts import ModelArtifacts
from sdk.spec.loader import PipelineFile
from tools.accuracy import match_detections

Detection = tuple[int, float, np.ndarray]


class Detector:
    """A model (a file, or an ONNX proto written to `scratch`) decoded by the pipeline's postprocessing."""

    def __init__(self, pipeline: PipelineFile, reference: ModelArtifacts, model: Path) -> None:
        from sdk.backends.onnxruntime_cpu import OnnxRuntimeBackend
        from sdk.postprocess import create_postprocessor
        from tools.calibration_frames import source_geometry

        spec = pipeline.spec
        self.backend = OnnxRuntimeBackend(model, spinning=False, threads=spec.model.threads)
        self.backend.open()
        net = (spec.preprocess.resize.width, spec.preprocess.resize.height)
        self.post = create_postprocessor(
            spec.postprocess, self.backend.outputs, net, reference.load_tensors(), pipeline.class_names(), plugin_folder=pipeline.plugin_folder()
        )
        ((_, self.input),) = self.backend.inputs.items()
        self.geometry = source_geometry(pipeline)

    def __call__(self, frame: np.ndarray) -> list[Detection]:
        np.copyto(self.input, frame)
        self.backend.infer()
        return [(d.class_id, float(d.score), np.array(d.box)) for d in self.post(self.geometry)]

    def close(self) -> None:
        self.backend.close()

    def __enter__(self) -> Detector:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def distance(reference: list[Detection], candidate: list[Detection]) -> float:
    """Score lost on matched pairs plus the score of unmatched detections on both sides (not normalised)."""
    pairs = match_detections(reference, candidate)
    matched = sum(abs(a - b) for _, a, b in pairs)
    matched_reference = sum(a for _, a, _ in pairs)
    matched_candidate = sum(b for _, _, b in pairs)
    unmatched = sum(d[1] for d in reference) - matched_reference + sum(d[1] for d in candidate) - matched_candidate
    return float(matched + unmatched)


def mean_distance(reference: Sequence[list[Detection]], detector: Detector, frames: Sequence[np.ndarray]) -> float:
    """The distance per reference detection over the frames (0 when the reference found nothing and neither did this)."""
    total = sum(distance(ref, detector(frame)) for ref, frame in zip(reference, frames, strict=True))
    count = sum(len(ref) for ref in reference)
    return total / max(count, 1)
