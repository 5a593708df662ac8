"""INT8 for a deploy: calibrate when no up-to-date artifacts exist, gate on accuracy, hand over what passed.

`deploy` of a pipeline with `model.precision: int8` runs this before anything reaches a target:
the calibration is cached by its content key (prepared model, media, preprocessing, frames,
method), so a second deploy reuses it; the accuracy gate's verdict is cached beside it. A gate
that fails stops the deploy with the numbers, and no target is touched.
"""

from __future__ import annotations

import json
from pathlib import Path

from sdk.artifacts import ModelArtifacts
from sdk.errors import ModelError
from sdk.sinks.files import partial_path, publish
from sdk.spec.loader import PipelineFile
from tools.accuracy import plot_accuracy, require_passed
from tools.calibrate import Calibrate, CalibrationArtifacts, check_accuracy
from tools.progress import Progress, SilentProgress

ACCURACY_FILE = "accuracy.json"


class Int8ForDeploy:
    """Settings in the constructor; calling it returns calibration artifacts whose accuracy gate passed."""

    def __init__(self, pipeline: PipelineFile, model: ModelArtifacts, cache_root: Path, progress: Progress | None = None) -> None:
        self.pipeline = pipeline
        self.model = model
        self.cache_root = Path(cache_root)
        self.progress = progress or SilentProgress()

    def __call__(self) -> CalibrationArtifacts:
        calibrate = Calibrate(self.pipeline, self.model, self.cache_root, self.progress)
        artifacts = calibrate()
        gate = self.pipeline.spec.calibration.accuracy.model_dump()
        recorded = artifacts.folder / ACCURACY_FILE
        cached = json.loads(recorded.read_text()) if recorded.is_file() else None
        if cached is not None and cached.get("gate") == gate:  # this calibration was already judged by this very gate
            if cached["report"]["passed"]:
                return artifacts
            raise ModelError(
                f"{self.pipeline.path}: model.precision int8: INT8 fails the accuracy gate on {cached['report']['frames']} held-out frames: "
                + "; ".join(cached["report"]["failures"]),
                hint=f"calibrate with more frames or another method, or relax calibration.accuracy (report: {recorded})",
            )
        report = check_accuracy(self.pipeline, self.model, artifacts, self.progress)
        partial = partial_path(recorded)
        partial.write_text(json.dumps({"gate": gate, "report": report.as_dict()}, indent=2) + "\n")
        publish(partial, recorded)
        plot_accuracy(report, artifacts.folder / "accuracy.png")
        require_passed(report, f"{self.pipeline.path}: model.precision int8")
        return artifacts


def trt_cache_file(artifacts: CalibrationArtifacts, tensorrt: str) -> Path:
    """The TensorRT calibration cache for this version, written once beside the ranges."""
    path = artifacts.folder / f"calibration-trt{tensorrt}.cache"
    if not path.is_file():
        partial = partial_path(path)
        partial.write_text(artifacts.trt_cache(tensorrt))
        publish(partial, path)
    return path
