"""`sdk dla-report`: the lazy step that finds the model and the target facts, then runs the analysis.

Offline (`--platform P --tensorrt V`) it needs no device at all; with `--target T` the device's
probe supplies the TensorRT version and the DLA core count (an Orin NX 8GB has one, not two).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from sdk.engine.placement import check_contract
from sdk.engine.platforms import TensorRTVersion, dla_availability
from sdk.errors import ConfigError
from tools.dla.analysis import DlaReport, analyse
from tools.dla.graph import load_graph


@dataclass(frozen=True)
class TargetFacts:
    platform: str
    tensorrt: TensorRTVersion
    dla_cores: int | None = None  # probed; None: the platform's documented count


def target_facts(target_name: str, tensorrt_override: str | None) -> TargetFacts:
    """Platform from the target file, TensorRT and DLA cores from the device's probe."""
    from tools.targets import LocalTarget, resolve_target

    target = resolve_target(target_name)
    if isinstance(target, LocalTarget):
        from sdk.probe import fingerprint

        platform, probed = "linux-generic", fingerprint()
    else:
        from tools.connect.remote_ops import probe

        platform, probed = target.spec.platform, probe(target)
    version = tensorrt_override or probed.get("tensorrt")
    if not version:
        raise ConfigError(f"target {target_name}: no TensorRT found on the device", hint="give the version with --tensorrt V")
    return TargetFacts(platform, TensorRTVersion.parse(version), probed.get("dla_cores"))


def camera_batch_note(spec) -> str:
    """What the camera count made of the batch the model is analysed (and a DLA engine built) with."""
    count, batch = len(spec.cameras), spec.batch_size
    if batch == count:
        return (
            f"{count} cameras: analysed with a static batch of {batch} (one frame of each camera per call); "
            "DLA engines need a static batch, so the engine is built for exactly this camera count"
        )
    return f"{count} cameras with batch.size 1: a static batch of 1, the cameras' frames run one after another through the engine"


class DlaAnalysis:
    """Lazy: settings now, the analysis when called. `source` is a pipeline file or an .onnx model."""

    def __init__(self, source: Path, facts: TargetFacts, precision: str = "int8", cache_root: Path | None = None) -> None:
        self.source = Path(source)
        self.facts = facts
        self.precision = precision
        self.cache_root = cache_root
        self.pipeline = None

    def model_path(self) -> Path:
        if self.source.suffix.lower() == ".onnx":
            if not self.source.is_file():
                raise ConfigError(f"{self.source} does not exist", hint="give a pipeline file or a prepared ONNX model")
            return self.source
        from sdk.spec import load_pipeline
        from tools.models.prepare import PrepareModel
        from tools.state import cache_dir

        self.pipeline = load_pipeline(self.source)
        return PrepareModel(self.pipeline, self.cache_root or cache_dir())().model_path

    def __call__(self) -> DlaReport:
        model = self.model_path()
        availability = dla_availability(self.facts.platform, self.facts.tensorrt, self.facts.dla_cores)
        report = analyse(load_graph(model), str(model), self.facts.platform, self.facts.tensorrt, availability, self.precision)
        if self.pipeline is not None and len(self.pipeline.spec.cameras) > 1:
            report = replace(report, recommendations=(*report.recommendations, camera_batch_note(self.pipeline.spec)))
        return report

    def check_contract(self, report: DlaReport) -> None:
        """The pipeline's `model.dla` contract against the prediction (nothing to check for a bare model)."""
        if self.pipeline is not None:
            check_contract(self.pipeline.spec.model.dla, report.summary(), f"{self.pipeline.path}: model.dla")
