"""The track stage of a run: one tracker per camera; without a `track` section it passes detections through."""

from __future__ import annotations

from contextlib import ExitStack

from sdk.spec.loader import PipelineFile
from sdk.track import create_tracker


class Tracking:
    """The `track` stage slot: one tracker per camera (`tracker.update(detections)` gives them track ids).

    Without a `track` section in the pipeline it passes the detections through."""

    name = "track"

    def __init__(self, pipeline: PipelineFile) -> None:
        track = getattr(pipeline.spec, "track", None)
        self.by_camera: dict[str, object] | None = None
        if track is not None:
            self.by_camera = {name: create_tracker(track) for name in pipeline.spec.cameras}

    def __enter__(self) -> Tracking:
        self._stack = ExitStack()
        for tracker in (self.by_camera or {}).values():
            self._stack.enter_context(tracker)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def __call__(self, camera: str, detections):
        if self.by_camera is None:
            return detections
        return self.by_camera[camera].update(detections)


def create_tracking(pipeline: PipelineFile) -> Tracking:
    """The track stage for the pipeline's cameras (a pass-through without `track:`)."""
    return Tracking(pipeline)


__all__ = ["Tracking", "create_tracking"]
