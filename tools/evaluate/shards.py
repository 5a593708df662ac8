"""A labelled set split into shards, each detected on its own, merged in the labels' order and scored once.

Each image's detections depend on that image alone (one image a call, the same stages and model), so the shards can
run anywhere: in this process's threads, or on Ray (`--ray`: a local Ray, or a cluster's address; the optional extra
`ray`). The merged detections are the unsplit run's, in the same order, and pycocotools scores them once: the figures
and their intervals are identical however the set is split (tested). Shards are contiguous runs of the labels' images,
their sizes differing by at most one.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from sdk.artifacts import ModelArtifacts
from sdk.errors import ConfigError, SdkError
from sdk.spec.loader import PipelineFile
from tools.evaluate.classmap import ClassMap
from tools.evaluate.detect import DetectionRun, detect
from tools.evaluate.labelset import LabelSet
from tools.progress import Progress, SilentProgress

RAY_INSTALL = "pip install 'perception-deploy-sdk[ray]'  (or: pip install 'ray>=2.9')"
LOCAL = "local"


def split(labels: LabelSet, shards: int) -> list[LabelSet]:
    """`shards` contiguous parts of the images (each with its own labels), in order; never an empty one."""
    if shards < 1:
        raise ConfigError(f"--shards {shards}: allowed: 1 or more", hint="split the labelled images over this many workers")
    count = min(shards, len(labels.images))
    bounds = [k * len(labels.images) // count for k in range(count + 1)]
    parts = []
    for start, end in zip(bounds, bounds[1:], strict=False):
        images = labels.images[start:end]
        ids = {i.id for i in images}
        parts.append(LabelSet(labels.source, labels.format, images, labels.categories, [a for a in labels.annotations if a["image_id"] in ids]))
    return parts


def merge(runs: list[DetectionRun]) -> DetectionRun:
    """The shards' runs as one, in shard order."""
    merged = DetectionRun()
    for run in runs:
        merged.detections += run.detections
        merged.not_decoded += run.not_decoded
        merged.size_mismatch += run.size_mismatch
    backends = dict.fromkeys(r.backend for r in runs)
    merged.backend = " | ".join(backends) + (f" ({len(runs)} shards)" if len(runs) > 1 else "")
    merged.postprocess = runs[0].postprocess if runs else ""
    return merged


def detect_shards(
    pipeline: PipelineFile,
    artifacts: ModelArtifacts,
    labels: LabelSet,
    mapping: ClassMap,
    shards: int = 1,
    ray: str | None = None,
    progress: Progress | None = None,
) -> DetectionRun:
    """The detections on every labelled image, `shards` parts at once: threads here, or Ray tasks (`ray`: `local` for a
    Ray started on this machine, else a cluster's address)."""
    progress = progress or SilentProgress()
    parts = split(labels, shards)
    if ray is not None:
        return merge(_on_ray(pipeline, artifacts, parts, mapping, ray, progress))
    if len(parts) == 1:
        return detect(pipeline, artifacts, parts[0], mapping, progress)
    task = progress.task(f"detecting on {len(labels.images)} labelled images in {len(parts)} shards", total=None)
    with ThreadPoolExecutor(max_workers=len(parts), thread_name_prefix="shard") as pool:
        runs = list(pool.map(lambda part: detect(pipeline, artifacts, part, mapping), parts))
    task.done()
    return merge(runs)


def require_ray():
    try:
        import ray
    except ImportError:
        raise ConfigError("--ray: Ray is not installed", hint=f"install the optional extra: {RAY_INSTALL}") from None
    return ray


def _on_ray(pipeline, artifacts, parts: list[LabelSet], mapping: ClassMap, address: str, progress: Progress) -> list[DetectionRun]:
    ray = require_ray()
    started_here = not ray.is_initialized()
    if started_here:
        # A local Ray's workers inherit this process's environment: they import this checkout's sdk and tools (a
        # runtime_env would say the same through Ray's agent, measured 15 s slower to start).
        root = str(Path(__file__).resolve().parents[2])
        saved = os.environ.get("PYTHONPATH")
        os.environ["PYTHONPATH"] = os.pathsep.join([root, saved or ""]).rstrip(os.pathsep)
        try:
            ray.init(
                address=None if address == LOCAL else address,
                num_cpus=len(parts) if address == LOCAL else None,
                include_dashboard=False,
                log_to_driver=False,
            )
        except Exception as exc:  # an unreachable address, a cluster that refuses: Ray's own exception types vary
            where = "a local Ray" if address == LOCAL else f"the Ray cluster at {address}"
            said = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ConfigError(
                f"--ray {address}: cannot start or reach {where}: {said}",
                hint="give a running Ray head's address (host:port or ray://host:10001, as ray start --head prints), or --ray alone",
            ) from None
        finally:
            if saved is None:
                os.environ.pop("PYTHONPATH")
            else:
                os.environ["PYTHONPATH"] = saved
    try:
        remote = ray.remote(num_cpus=1)(_detect_part)
        task = progress.task(f"detecting on {sum(len(p.images) for p in parts)} labelled images: {len(parts)} Ray tasks", total=None)
        try:
            runs = ray.get([remote.remote(pipeline, artifacts, part, mapping) for part in parts])
        except ray.exceptions.RayTaskError as exc:
            cause = getattr(exc, "cause", None)
            if isinstance(cause, SdkError):
                raise SdkError(f"a Ray task: {cause.message}", hint=cause.hint) from None
            message = str(cause).strip() if cause is not None and str(cause).strip() else str(exc).strip().splitlines()[-1]
            raise SdkError(
                f"a Ray task failed: {message}", hint="every Ray node must see the pipeline, its model and the labelled images at the same paths"
            ) from None
        task.done()
        return runs
    finally:
        if started_here:
            ray.shutdown()


def _detect_part(pipeline, artifacts, part, mapping) -> DetectionRun:
    return detect(pipeline, artifacts, part, mapping)


__all__ = ["LOCAL", "RAY_INSTALL", "detect_shards", "merge", "require_ray", "split"]
