"""An evaluation run on a target (`python -m sdk run --evaluate DIR`): the release's own stages on a folder of
labelled images the host sent, at the evaluation's detection settings.

The release runs as it is (its backend and engine, its preprocessing on its device, its decoder), with four changes
that make its detections the ones `sdk evaluate` scores on the host: the decoder's thresholds are the pipeline's
`evaluation:` settings (a low score floor, its own NMS, at most `max_detections` an image), not the deployment's;
no tracker and no cascade (an image's detections depend on that image alone); the one camera replays DIR once, every
image kept, as fast as it goes; and detections.jsonl is the only sink, with every digit of boxes and scores. Each line
names the image's file, so the host finds each image's detections by name.
"""

from __future__ import annotations

from pathlib import Path

from sdk.errors import ConfigError
from sdk.sources.images import IMAGE_SUFFIXES
from sdk.spec.bounds import MAX_REPLAY_FRAMES
from sdk.spec.loader import PipelineFile
from sdk.spec.schema import JsonlSink, Pipeline, Replay

HERE = "images://."  # the folder itself: the run's source folder is DIR (PipelineRunner's `images`)


def with_evaluation_thresholds(spec: Pipeline) -> Pipeline:
    """The spec with the evaluation's detection settings in place of the deployment's thresholds, and no tracker or
    cascade (shared with the host's `sdk evaluate --target local`)."""
    settings = spec.evaluation
    postprocess = spec.postprocess.model_copy(
        update={
            "score_threshold": settings.score_threshold,
            "iou_threshold": settings.iou_threshold,
            "max_detections": settings.max_detections,
            "nms": settings.nms,
        }
    )
    return spec.model_copy(update={"postprocess": postprocess, "track": None, "cascade": ()})


def evaluation_run(pipeline: PipelineFile, images: Path) -> PipelineFile:
    """The pipeline as an evaluation run on `images` runs it (see the module's text)."""
    if len(pipeline.spec.cameras) > 1:
        raise ConfigError(
            f"{pipeline.path}: --evaluate: the pipeline has {len(pipeline.spec.cameras)} cameras; allowed: one camera",
            hint="evaluate a pipeline of one camera",
        )
    if not images.is_dir():
        raise ConfigError(f"--evaluate {images}: no such folder", hint="the folder of the images to evaluate on")
    count = sum(1 for p in images.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
    if count == 0:
        raise ConfigError(f"--evaluate {images}: no image in the folder; allowed: {', '.join(IMAGE_SUFFIXES)}", hint="send the labelled images")
    if count > MAX_REPLAY_FRAMES:
        raise ConfigError(
            f"--evaluate {images}: {count} images; allowed: at most {MAX_REPLAY_FRAMES} a run", hint="split the images over more targets"
        )
    replay = Replay(loop=False, frames=count, rate_fps=None, late_frames="keep", pace="rate")
    spec = with_evaluation_thresholds(pipeline.spec)
    if spec.multi_camera:  # `sources:` of one camera (a recording's one topic): that camera replays the folder
        ((name, camera),) = spec.sources.items()
        sources = {"sources": {name: camera.model_copy(update={"uri": HERE, "replay": replay, "reconnect": None})}}
    else:
        sources = {"source": spec.source.model_copy(update={"uri": HERE, "replay": replay, "reconnect": None})}
    spec = spec.model_copy(update={**sources, "sinks": (JsonlSink(kind="jsonl", exact=True),)})
    return PipelineFile(spec, pipeline.path)


__all__ = ["HERE", "evaluation_run", "with_evaluation_thresholds"]
