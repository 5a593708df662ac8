"""What a release carries: the `sdk` runtime (never `tools`), the pipeline and its replay media, the prepared model."""

from __future__ import annotations

import platform
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import sdk
from sdk.artifacts import ENGINE_FILE, PRECISION_FILE, QDQ_FILE, RANGES_FILE, TRT_CACHE_FILE, ModelArtifacts
from sdk.spec.loader import PipelineFile
from tools.release.wheels import pipeline_modules

PIPELINE_DIR = "pipeline"
ARTIFACTS_DIR = "artifacts"


@dataclass(frozen=True)
class Bundle:
    """Release-relative path -> host file, plus what the manifest records about the build."""

    files: dict[str, Path]
    pipeline: str
    artifacts: str
    fingerprint: dict
    modules: tuple[str, ...] = ()  # optional runtime modules the pipeline needs (wheels.pipeline_modules): shipped if the device lacks them


def runtime_files() -> dict[str, Path]:
    root = Path(sdk.__file__).resolve().parent
    return {f"sdk/{path.relative_to(root).as_posix()}": path for path in sorted(root.rglob("*.py")) if "__pycache__" not in path.parts}


def collect_bundle(pipeline: PipelineFile, artifacts: ModelArtifacts, prepare_key: str, int8=None, live_view: int | None = None) -> Bundle:
    files = runtime_files()
    folder = pipeline.folder
    pipeline_rel = f"{PIPELINE_DIR}/{pipeline.path.name}"
    files[pipeline_rel] = pipeline.path
    for camera in pipeline.spec.cameras:
        source = pipeline.source_file(camera)
        if source is None:
            continue
        # Replay media travel with the pipeline, at the same place relative to it (every camera's).
        media = sorted(p for p in source.rglob("*") if p.is_file()) if source.is_dir() else [source]
        for path in media:
            files[f"{PIPELINE_DIR}/{path.relative_to(folder).as_posix()}"] = path
    labels = pipeline.labels_file()
    if labels is not None:  # a classify or segment decoder's label file travels with the pipeline, where it names it
        files[f"{PIPELINE_DIR}/{labels.relative_to(folder).as_posix()}"] = labels
    plugins = pipeline.plugin_folder()
    if plugins is not None:  # a `kind: python` decoder's modules travel with the pipeline, at the same place relative to it
        for path in sorted(p for p in plugins.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
            files[f"{PIPELINE_DIR}/{path.relative_to(folder).as_posix()}"] = path
    for path, _ in pipeline.cascade_files():  # the cascade's models and character lists, beside the pipeline as written
        files[f"{PIPELINE_DIR}/{path.relative_to(folder).as_posix()}"] = path
    for path in artifacts.files():
        files[f"{ARTIFACTS_DIR}/{path.name}"] = path
    fingerprint = {
        "sdk": sdk.__version__,
        "prepare_key": prepare_key,
        "host_python": sys.version.split()[0],
        "host_machine": platform.machine(),
    }
    from tools.models.optimized import optimize_record

    optimized = optimize_record(pipeline.model_path)
    if optimized is not None:  # how the deployed model differs from its original, signed with the manifest
        fingerprint["optimize"] = optimized
    bundle = Bundle(files, pipeline_rel, ARTIFACTS_DIR, fingerprint, pipeline_modules(pipeline.spec, live_view))
    return with_int8(bundle, int8.qdq_model, int8.ranges, precision=int8.precision_file) if int8 is not None else bundle


def with_int8(bundle: Bundle, qdq_model: Path, ranges: Path, trt_cache: Path | None = None, precision: Path | None = None) -> Bundle:
    """The bundle plus the INT8 artifacts: the Q/DQ model, its ranges, the cache for the target's TensorRT,
    and the layers kept out of INT8 (precision.json, TensorRT 10's per-layer precision list)."""
    files = {**bundle.files, f"{ARTIFACTS_DIR}/{QDQ_FILE}": qdq_model, f"{ARTIFACTS_DIR}/{RANGES_FILE}": ranges}
    if trt_cache is not None:
        files[f"{ARTIFACTS_DIR}/{TRT_CACHE_FILE}"] = trt_cache
    if precision is not None:
        files[f"{ARTIFACTS_DIR}/{PRECISION_FILE}"] = precision
    return replace(bundle, files=files)


def with_engine(bundle: Bundle, engine: Path) -> Bundle:
    """The bundle plus the TensorRT engine built for this device (content-addressed like every file)."""
    return replace(bundle, files={**bundle.files, f"{ARTIFACTS_DIR}/{ENGINE_FILE}": engine})


def with_wheels(bundle: Bundle, wheels: list[Path]) -> Bundle:
    """The bundle plus `wheels/<file>` for the device's offline environment."""
    files = {**bundle.files, **{f"wheels/{wheel.name}": wheel for wheel in wheels}}
    return replace(bundle, files=files, fingerprint={**bundle.fingerprint, "wheels": sorted(w.name for w in wheels)})
