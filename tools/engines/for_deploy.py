"""The engine a deploy ships: planned on the host, built on the target (or taken from the host's cache).

Decided from the pipeline's `model.backend` and the device's probe: `onnxruntime` never builds;
`auto` builds where the device has TensorRT and a GPU (a compute capability in its probe);
`tensorrt` must build, and a device without TensorRT is refused before anything is sent. The plan
uses the pipeline's precision; INT8 comes from the deploy's own calibration (the cache for this
TensorRT, the layers the accuracy fallback kept out of INT8; the Q/DQ model for TensorRT 11).
"""

from __future__ import annotations

from pathlib import Path

from sdk.artifacts import ModelArtifacts
from sdk.engine.platforms import TensorRTVersion
from sdk.errors import EngineBuildError
from sdk.spec.loader import PipelineFile
from tools.dla.report import TargetFacts
from tools.engines.plan import PlanEngineBuild
from tools.engines.remote_build import BuildEngineOnTarget
from tools.int8.for_deploy import Int8Choice, trt_cache_file
from tools.progress import Progress
from tools.targets import RemoteTarget


def wants_engine(pipeline: PipelineFile, target, facts: dict) -> bool:
    backend = pipeline.spec.model.backend
    has_tensorrt = isinstance(target, RemoteTarget) and bool(facts.get("tensorrt"))
    if backend == "tensorrt" and not has_tensorrt:
        raise EngineBuildError(
            f"{pipeline.path}: model.backend is tensorrt but {target.name} has no TensorRT (probe: {facts.get('tensorrt')})",
            hint="deploy to a Jetson/DRIVE target with TensorRT, or use backend: auto",
        )
    return has_tensorrt and (backend == "tensorrt" or (backend == "auto" and facts.get("compute_capability") is not None))


def engine_for_device(
    pipeline: PipelineFile, model: ModelArtifacts, int8: Int8Choice | None, target, facts: dict, cache_root: Path, progress: Progress
) -> Path:
    tensorrt = TensorRTVersion.parse(facts["tensorrt"])
    precision = pipeline.spec.model.precision
    higher = tuple(int8.fp16_layers) if int8 is not None else ()
    task = progress.task(f"planning the TensorRT {tensorrt} engine ({precision})", total=None)
    planned = PlanEngineBuild(pipeline.path, TargetFacts(target.spec.platform, tensorrt, facts.get("dla_cores")), precision, cache_root, higher)()
    task.done()
    plan = planned.plan
    onnx_model, calibration = model.model_path, None
    if plan.int8_source == "qdq":
        onnx_model = int8.qdq_model  # strongly typed: the scales travel in the graph
    elif plan.int8_source == "calibration_cache":
        calibration = trt_cache_file(int8.calibration, facts["tensorrt"], int8.dla)
    task = progress.task(f"building the engine on {target.name}", total=None)
    try:
        built = BuildEngineOnTarget(target, onnx_model, plan, calibration, pipeline.spec.model.dla, cache_root)()
    finally:
        task.done()
    return built.engine
