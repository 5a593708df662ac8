"""The run's cameras, one camera being a set of one: a stream per camera, the feed that hands the loop one batch per
inference call (sdk.runtime.gather), how many frames a call takes, and the cameras seen as one source.

Batching: the backend's input buffer holds B frames. B equal to the camera count (N > 1): camera i is preprocessed into
slot i and decoded from slot i, one inference call a batch. B = 1: every camera's frames run one after another through
the same engine (slot 0).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from sdk.errors import ConfigError, ModelError
from sdk.runtime.gather import CameraGatherer, CameraSlot, SingleCamera
from sdk.sources import FrameStream, StreamCounters, open_stream
from sdk.spec.loader import PipelineFile


def open_cameras(pipeline: PipelineFile, limit: int | None, *, wait_for_camera: bool, base: Path | None = None) -> list[CameraSlot]:
    """A stream per camera (not yet opened), in the file's order; `limit`: frames per camera; `base`: the folder the
    sources' paths are in (default: the pipeline's; an evaluation run's images are in a folder of their own)."""
    cameras = []
    for index, (name, source) in enumerate(pipeline.spec.cameras.items()):
        stream = open_stream(source.uri, source.replay, base or pipeline.folder, max_frames=limit or source.replay.frames, reconnect=source.reconnect)
        stream.wait_for_camera = wait_for_camera
        if pipeline.spec.multi_camera:
            stream.name = name  # what the status calls the camera
        cameras.append(CameraSlot(name, index, stream))
    share_origin([c.stream for c in cameras if c.stream.replay.pace == "recorded"])
    return cameras


def share_origin(streams: list[FrameStream]) -> None:
    """Cameras at the recorded pace count from one origin (sdk.sources.stream.SharedOrigin): the earliest first stamp
    of them all, so their frames keep the recorded order across cameras."""
    from sdk.sources.stream import SharedOrigin

    firsts = [getattr(s.reader, "first_stamp_ns", lambda: None)() for s in streams] if len(streams) > 1 else []
    known = [f for f in firsts if f is not None]
    if known:
        origin = SharedOrigin(min(known))
        for stream in streams:
            stream.origin = origin


def create_feed(pipeline: PipelineFile, cameras: list[CameraSlot]):
    """The sources and batch stages: one camera read in the loop's thread, several gathered under `batch.wait_ms`."""
    if len(cameras) == 1:
        return SingleCamera(cameras[0], tag=pipeline.spec.multi_camera)
    return CameraGatherer(cameras, pipeline.spec.batch.wait_ms)


def batch_slots(pipeline: PipelineFile, input_buffer: np.ndarray, model_path: Path) -> int:
    """How many frames one inference call takes: the camera count (batched) or 1 (one after another)."""
    cameras = len(pipeline.spec.cameras)
    batch = int(input_buffer.shape[0]) if input_buffer.ndim else 1
    if pipeline.spec.batch.size == 1 and batch != 1:
        raise ConfigError(
            f"{pipeline.path}: batch.size is 1 but the model {model_path.name} takes a batch of {batch}",
            hint="set model.prepare.inputs' first dimension to 1, or batch.size: cameras",
        )
    if batch not in (1, cameras):
        raise ModelError(
            f"{model_path}: the model takes a batch of {batch} frames, the pipeline has {cameras} camera(s); allowed: 1 or {cameras}",
            hint="set model.prepare.inputs' first dimension to 1 or to the camera count",
        )
    return batch


def describe_batching(cameras: int, batch: int) -> str:
    if cameras == 1:
        return "one camera, one frame per inference call"
    if batch == cameras:
        return f"{cameras} cameras batched: one inference call takes a frame of each camera that delivered in time"
    return f"{cameras} cameras, fixed batch of 1: their frames run one after another through the same engine"


class CameraSet:
    """Several cameras seen by a service as one source: on schedule while any reconnects, conditions naming each."""

    def __init__(self, streams: list[FrameStream]) -> None:
        self.streams = streams

    def reconnect_on_schedule(self, margin_s: float = 1.0) -> bool:
        return any(stream.reconnect_on_schedule(margin_s) for stream in self.streams)

    def condition(self) -> str | None:
        found = [c for c in (stream.condition() for stream in self.streams) if c]
        return "; ".join(found) or None

    def stop(self) -> None:
        for stream in self.streams:
            stream.stop()

    @property
    def source_ended(self) -> bool:
        return all(stream.source_ended for stream in self.streams)


def summed_counters(counters: list[StreamCounters]) -> StreamCounters:
    """The cameras' counters added up (a status' and the report's aggregate)."""
    total = StreamCounters()
    for c in counters:
        for key in ("delivered", "dropped", "corrupt", "lost", "out_of_order", "loops", "disconnects", "reconnect_attempts"):
            setattr(total, key, getattr(total, key) + getattr(c, key))
        total.corrupt_last = c.corrupt_last or total.corrupt_last
        total.lost_last = c.lost_last or total.lost_last
        total.out_of_order_last = c.out_of_order_last or total.out_of_order_last
    return total


__all__ = ["CameraSet", "batch_slots", "create_feed", "describe_batching", "open_cameras", "summed_counters"]
