"""The host's gate before any engine build: analyse, enforce the pipeline's placement contract, freeze the plan.

A build the analysis says breaks `model.dla` is refused here, on the host, with the numbers — not
found out 15 minutes into a build on the vehicle. The device builder checks the same contract
again with TensorRT's own answers.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sdk.engine.build_plan import BuildPlan, plan_build
from sdk.engine.platforms import dla_availability
from tools.dla.analysis import DlaReport
from tools.dla.report import DlaAnalysis, TargetFacts
from tools.int8.calibrate import TRT_ALGORITHM


@dataclass(frozen=True)
class PlannedBuild:
    report: DlaReport
    plan: BuildPlan


class PlanEngineBuild:
    """Lazy: settings now; analysis, contract check and the frozen plan when called."""

    def __init__(
        self, pipeline: Path, facts: TargetFacts, precision: str = "int8", cache_root: Path | None = None, higher_precision: tuple[str, ...] = ()
    ) -> None:
        self.analysis = DlaAnalysis(pipeline, facts, precision, cache_root)
        self.facts = facts
        self.precision = precision
        self.higher_precision = tuple(higher_precision)  # from the INT8 accuracy fallback (Int8Choice.fp16_layers)

    def __call__(self) -> PlannedBuild:
        import onnx

        report = self.analysis()
        self.analysis.check_contract(report)  # raises EngineBuildError with the numbers
        contract = self.analysis.pipeline.spec.model.dla
        model = onnx.load(report.model, load_external_data=False)
        shapes = {i.name: tuple(d.dim_value for d in i.type.tensor_type.shape.dim) for i in model.graph.input}  # 0: dynamic
        cameras = len(self.analysis.pipeline.spec.cameras)
        cores = dla_availability(self.facts.platform, self.facts.tensorrt, self.facts.dla_cores).cores
        predicted = tuple((v.name, v.layer, v.device) for v in report.layers)
        calibration = self.analysis.pipeline.spec.calibration
        algorithm = TRT_ALGORITHM[calibration.method] if calibration is not None else "EntropyCalibration2"
        plan = plan_build(
            self.facts.tensorrt,
            shapes,
            self.precision,
            contract,
            cores,
            predicted,
            calibrator=algorithm,
            higher_precision=self.higher_precision,
            cameras=cameras,
            sparse_weights=sparse_layers(self.analysis.pipeline.model_path),
        )
        return PlannedBuild(report, plan)


def sparse_layers(model_path: Path) -> tuple[str, ...]:
    """The layers `sdk optimize` made 2:4 sparse, from the model's `sdk.optimize` metadata (none for other models)."""
    from tools.models.optimized import optimize_record

    return tuple((optimize_record(model_path) or {}).get("sparse_layers", ()))
