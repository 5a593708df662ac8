"""The `calibration` section: INT8 ranges from which frames, by which method, under which accuracy gate."""


from typing import Literal

from pydantic import field_validator

from sdk.spec.bounds import Frozen, Int, Real
from sdk.spec.budgets import Ratio

MAX_CALIBRATION_FRAMES = 100_000


class AccuracyGate(Frozen):
    """INT8 against FP32 on held-out frames; a calibration that misses any of these is refused."""

    min_cosine: Real("cosine similarity of the raw outputs, at least", ge=-1, le=1) = 0.99
    min_recall: Ratio("FP32 detections the INT8 model finds, at least") = 0.9
    min_precision: Ratio("INT8 detections that match FP32, at least") = 0.9
    max_mean_score_drift: Ratio("mean |INT8 score - FP32 score| of matched detections, at most") = 0.05
    # With `evaluation.labels`: mAP@[.5:.95] the candidate may lose against the FP32 model on the labels (1 point).
    max_map_drop: Ratio("mAP@[.5:.95] lost against the FP32 model on evaluation.labels, at most") = 0.01


class Calibration(Frozen):
    """INT8 calibration: which frames (deterministic), which range method, and the accuracy gate."""

    source: str | None = None  # a file:// or images:// URI; default: the pipeline's own source (with `sources:`, every camera's)
    # Calibration frames are streamed (decoded a few ahead, not kept); the held-out ones are kept in
    # memory, preprocessed: the pipeline caps their bytes (bounds.MAX_HELD_FRAMES_BYTES).
    frames: Int(1, MAX_CALIBRATION_FRAMES, "frames the ranges are collected on") = 300
    stride: Int(1, MAX_CALIBRATION_FRAMES, "frames are drawn from every stride-th frame of the source") = 1
    seed: Int(0, 2**32 - 1, "seed of the draw: the same seed, the same frames") = 0
    holdout_frames: Int(1, MAX_CALIBRATION_FRAMES, "frames the accuracy gate runs on, never calibrated on; kept in memory") = 50
    method: Literal["entropy", "minmax", "percentile"] = "entropy"
    percentile: Real("percentile of |x| taken as the range (method: percentile)", gt=90, lt=100) = 99.99
    accuracy: AccuracyGate = AccuracyGate()
    # A failing gate: rank layers by sensitivity and keep the worst out of INT8 until it passes (fp16), or refuse (none).
    fallback: Literal["fp16", "none"] = "fp16"
    fallback_max_layers: Int(1, 1000, "trials of the fallback search, worst candidates first") = 12

    @field_validator("source")
    @classmethod
    def _recorded_source(cls, uri: str | None) -> str | None:
        if uri is not None and uri.partition("://")[0] not in ("file", "images"):
            raise ValueError(f"calibration frames come from a recording (file://, images://), not {uri!r}")
        return uri


__all__ = ["MAX_CALIBRATION_FRAMES", "AccuracyGate", "Calibration"]
