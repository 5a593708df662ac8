"""Accuracy acceptance: the validation run's detections against the host's FP32 reference.

The host runs the prepared FP32 model through the same preprocessing and decoding (sdk's own
runtime, ONNX Runtime on the CPU) on the same source frames, unpaced, and matches detections per
frame (same class, IoU >= 0.5). On a device running an INT8 TensorRT engine this is the check
that what runs on the vehicle still sees what the model saw on the workstation.
"""

from __future__ import annotations

import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from sdk.artifacts import ModelArtifacts
from sdk.runtime.runner import PipelineRunner
from sdk.runtime.verdict import FAIL, PASS, BudgetCheck
from sdk.spec.loader import PipelineFile
from sdk.spec.schema import AccuracyAcceptance, JsonlSink
from tools.int8.accuracy import match_detections
from tools.reports.detections_file import read_detections

REFERENCE_FILE = "reference_detections.jsonl"


@dataclass(frozen=True)
class AccuracyResult:
    frames: int
    reference_detections: int
    run_detections: int
    matched: int
    mean_iou: float
    mean_score_drift: float
    thresholds: AccuracyAcceptance

    @property
    def recall(self) -> float:
        return self.matched / self.reference_detections if self.reference_detections else 1.0

    @property
    def precision(self) -> float:
        return self.matched / self.run_detections if self.run_detections else 1.0

    def as_dict(self) -> dict:
        return {**asdict(self), "recall": round(self.recall, 6), "precision": round(self.precision, 6)}

    def checks(self) -> list[BudgetCheck]:
        t = self.thresholds
        rows = [
            ("recall", t.min_recall, self.recall, self.recall >= t.min_recall),
            ("precision", t.min_precision, self.precision, self.precision >= t.min_precision),
            ("mean_iou", t.min_mean_iou, self.mean_iou, self.mean_iou >= t.min_mean_iou),
            ("mean_score_drift", t.max_mean_score_drift, self.mean_score_drift, self.mean_score_drift <= t.max_mean_score_drift),
        ]
        detail = f"{self.matched} matched of {self.reference_detections} reference / {self.run_detections} run detections"
        return [
            BudgetCheck(f"accuracy.{name}", limit, round(value, 6), PASS if ok else FAIL, self.frames, None, detail)
            for name, limit, value, ok in rows
        ]


def reference_model(pipeline: PipelineFile, artifacts: ModelArtifacts) -> tuple[PipelineFile, ModelArtifacts]:
    """The pipeline and prepared model whose FP32 detections are the reference: the pipeline's own model, or the
    original it was optimized from (`model.reference`, written by `sdk optimize`)."""
    spec = pipeline.spec
    if not spec.model.reference:
        return pipeline, artifacts
    from tools.models.prepare import PrepareModel
    from tools.state import cache_dir

    pipeline.reference_path  # noqa: B018  (inside the pipeline's folder, as model.path)
    twin = PipelineFile(
        spec.model_copy(update={"model": spec.model.model_copy(update={"path": spec.model.reference, "reference": None})}), pipeline.path
    )
    return twin, PrepareModel(twin, cache_dir())()


def run_reference(pipeline: PipelineFile, artifacts: ModelArtifacts, frames: int, destination: Path) -> Path:
    """The FP32 reference detections for the first `frames` source frames, written to `destination` (of the original
    model where the pipeline names one: `model.reference`)."""
    pipeline, artifacts = reference_model(pipeline, artifacts)
    spec = pipeline.spec

    def unpaced(source):
        return source.model_copy(update={"replay": source.replay.model_copy(update={"rate_fps": None, "late_frames": "keep"})})

    sources = {"sources": {name: unpaced(s) for name, s in spec.sources.items()}} if spec.multi_camera else {"source": unpaced(spec.source)}
    reference = PipelineFile(
        spec.model_copy(
            update={
                **sources,
                "sinks": (JsonlSink(kind="jsonl"),),
                "model": spec.model.model_copy(update={"precision": "fp32"}),  # the reference is the FP32 model, whatever ran
            }
        ),
        pipeline.path,
    )
    with tempfile.TemporaryDirectory(prefix=".reference-", dir=destination.parent) as scratch:
        PipelineRunner(reference, artifacts, Path(scratch), max_frames=frames, spinning=False).run()  # host work: no spinning
        (Path(scratch) / "detections.jsonl").replace(destination)
    return destination


def compare_per_camera(reference: Path, run: Path, thresholds: dict[str, AccuracyAcceptance]) -> dict[str, AccuracyResult]:
    """Each camera's detections against its own reference frames, under its own thresholds (by camera name)."""
    ref_frames, run_frames = read_detections(reference), read_detections(run)
    return {
        name: _compare(
            {k: v for k, v in ref_frames.items() if isinstance(k, tuple) and k[0] == name},
            {k: v for k, v in run_frames.items() if isinstance(k, tuple) and k[0] == name},
            limits,
        )
        for name, limits in thresholds.items()
    }


def compare_with_reference(reference: Path, run: Path, thresholds: AccuracyAcceptance) -> AccuracyResult:
    return _compare(read_detections(reference), read_detections(run), thresholds)


def _compare(ref_frames: dict, run_frames: dict, thresholds: AccuracyAcceptance) -> AccuracyResult:
    common = sorted(set(ref_frames) & set(run_frames))  # a dropped frame is the latency budget's business
    n_ref = n_run = 0
    ious: list[float] = []
    drifts: list[float] = []
    for frame in common:
        pairs = match_detections(ref_frames[frame], run_frames[frame])
        n_ref += len(ref_frames[frame])
        n_run += len(run_frames[frame])
        ious.extend(iou for iou, _, _ in pairs)
        drifts.extend(abs(r - c) for _, r, c in pairs)
    return AccuracyResult(
        len(common),
        n_ref,
        n_run,
        len(ious),
        float(np.round(np.mean(ious), 6)) if ious else 1.0,
        float(np.round(np.mean(drifts), 6)) if drifts else 0.0,
        thresholds,
    )
