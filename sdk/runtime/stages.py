"""The pipeline's stages, each built by one factory from the spec and each a context manager.

sources -> batch -> preprocess -> infer -> decode (-> cascade steps) -> track -> sinks. The runner
(`sdk.runtime.runner`) only composes them; a new capability lands here as a stage (or as a kind
behind a stage's factory), not as a branch in the loop. Report names of the timed stages stay
`preprocess`, `infer`, `postprocess` (decode and track) and `sink`.

Batching: the backend's input buffer holds B frames. B equal to the camera count (N > 1): camera i
is preprocessed into slot i and decoded from slot i, one inference call a batch. B = 1: every
camera's frames run one after another through the same engine (slot 0). A preprocessor and a
decoder per camera are bound to their slot's views of the bound buffers once; nothing is
allocated per frame.
"""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

import numpy as np

from sdk.errors import ConfigError, ModelError
from sdk.postprocess import create_postprocessor
from sdk.runtime.gather import CameraGatherer, CameraSlot, SingleCamera
from sdk.sources import open_stream
from sdk.spec.loader import PipelineFile


def create_preprocessor(spec, output: np.ndarray):
    """The one place a preprocessor is made (sdk.preprocess chooses CPU or CUDA where it offers to)."""
    from sdk.preprocess import CpuPreprocessor

    return CpuPreprocessor(spec, output)


def open_cameras(pipeline: PipelineFile, limit: int | None, *, wait_for_camera: bool) -> list[CameraSlot]:
    """A stream per camera (not yet opened), in the file's order; `limit`: frames per camera."""
    cameras = []
    for index, (name, source) in enumerate(pipeline.spec.cameras.items()):
        stream = open_stream(source.uri, source.replay, pipeline.folder, max_frames=limit or source.replay.frames, reconnect=source.reconnect)
        stream.wait_for_camera = wait_for_camera
        if pipeline.spec.multi_camera:
            stream.name = name  # what the status calls the camera
        cameras.append(CameraSlot(name, index, stream))
    return cameras


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


class Preprocessing:
    """A preprocessor per camera, each writing into its slot of the model input."""

    name = "preprocess"

    def __init__(self, pipeline: PipelineFile, input_buffer: np.ndarray, batch: int) -> None:
        spec = pipeline.spec
        self.by_camera = []
        for index, camera in enumerate(spec.cameras):
            slot = index if batch > 1 else 0
            self.by_camera.append(create_preprocessor(spec.preprocess_for(camera), input_buffer[slot : slot + 1]))
        self._stack = ExitStack()

    def __enter__(self) -> Preprocessing:
        for preprocessor in self.by_camera:
            self._stack.enter_context(preprocessor)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def describe(self) -> str:
        return self.by_camera[0].describe()


class Decoding:
    """The decoder (and its NMS) per batch slot, bound to that slot's views of the output buffers."""

    name = "postprocess"

    def __init__(self, pipeline: PipelineFile, outputs: dict[str, np.ndarray], tensors: dict[str, np.ndarray], batch: int) -> None:
        spec = pipeline.spec
        net_size = (spec.preprocess.resize.width, spec.preprocess.resize.height)
        self.by_slot = []
        for slot in range(batch):
            views = {name: array[slot : slot + 1] if batch > 1 else array for name, array in outputs.items()}
            self.by_slot.append(create_postprocessor(spec.postprocess, views, net_size, tensors))
        self._stack = ExitStack()

    def __enter__(self) -> Decoding:
        for decoder in self.by_slot:
            if hasattr(decoder, "__enter__"):
                self._stack.enter_context(decoder)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()


class Tracking:
    """The `track` stage slot: one tracker per camera (`tracker.update(detections)` gives them track ids).

    Without a `track` section in the pipeline it passes the detections through."""

    name = "track"

    def __init__(self, pipeline: PipelineFile) -> None:
        track = getattr(pipeline.spec, "track", None)
        self.by_camera: dict[str, object] | None = None
        if track is not None:
            from sdk.track import create_tracker  # the tracker's own package (sdk/track)

            self.by_camera = {name: create_tracker(track) for name in pipeline.spec.cameras}

    def __enter__(self) -> Tracking:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def __call__(self, camera: str, detections):
        if self.by_camera is None:
            return detections
        return self.by_camera[camera].update(detections)


__all__ = [
    "Decoding",
    "Preprocessing",
    "Tracking",
    "batch_slots",
    "create_feed",
    "create_preprocessor",
    "describe_batching",
    "open_cameras",
]
