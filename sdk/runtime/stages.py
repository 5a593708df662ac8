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
from sdk.postprocess import create_postprocessor, describe
from sdk.runtime.gather import CameraGatherer, CameraSlot, SingleCamera
from sdk.sources import open_stream
from sdk.spec.loader import PipelineFile

# Why several cameras preprocess on the CPU (decision 0604): the CUDA path binds one frame's kernel output to the
# engine's whole input binding and owns the backend's stream; batch slots and per-camera sessions are not built yet.
SEVERAL_CAMERAS = "several cameras: the CUDA preprocessing takes one camera"


def create_preprocessor(pipeline: PipelineFile, camera: str, backend, image_input: str, batch: int, slot: int, kernels_dir: Path | None):
    """The one place a preprocessor is made: sdk.preprocess chooses CPU or CUDA (preprocess.device) for one camera;
    several cameras write their slots of the input on the CPU."""
    from sdk.preprocess import CpuPreprocessor
    from sdk.preprocess import create_preprocessor as chosen

    spec = pipeline.spec.preprocess_for(camera)
    where = f"{pipeline.path}: preprocess.device"
    if not pipeline.spec.multi_camera:
        return chosen(spec, backend, image_input=image_input, kernels_dir=kernels_dir, where=where)
    if spec.device == "cuda":
        raise ConfigError(
            f"{where}: cuda, but the pipeline has {len(pipeline.spec.cameras)} cameras; allowed with several cameras: auto or cpu",
            hint="use preprocess.device: auto (the cameras preprocess on the CPU) or one camera per pipeline",
        )
    from sdk.gpu.session import DeviceChoice

    output = backend.inputs[image_input]
    stage = CpuPreprocessor(spec, output[slot : slot + 1] if batch > 1 else output)
    stage.choice = DeviceChoice("cpu", SEVERAL_CAMERAS if spec.device == "auto" else "preprocess.device is cpu")
    return stage


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

    def __init__(self, pipeline: PipelineFile, backend, image_input: str, batch: int, kernels_dir: Path | None = None) -> None:
        spec = pipeline.spec
        self.by_camera = []
        for index, camera in enumerate(spec.cameras):
            slot = index if batch > 1 else 0
            self.by_camera.append(create_preprocessor(pipeline, camera, backend, image_input, batch, slot, kernels_dir))
        self._stack = ExitStack()

    @property
    def session(self):
        """The CUDA session of a one-camera CUDA path (its decoders run on the engine's outputs), else None."""
        return self.by_camera[0].session if len(self.by_camera) == 1 else None

    def infer_step(self, backend):
        """The infer stage: the backend's infer(), or on a CUDA path with preprocess.cuda_graph the session's (the
        engine's launch is then part of the frame's graph)."""
        session = self.session
        return session.infer_step if session is not None and session.graph is not None else backend.infer

    def __enter__(self) -> Preprocessing:
        for preprocessor in self.by_camera:
            self._stack.enter_context(preprocessor)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def describe(self) -> str:
        return self.by_camera[0].describe()

    def report(self) -> dict:
        """The report's `preprocess` section: the device used, why, and how (the first camera's: they all agree)."""
        return self.by_camera[0].report()


class Decoding:
    """The decoder (and its NMS) per batch slot, bound to that slot's views of the output buffers."""

    name = "postprocess"

    def __init__(self, pipeline: PipelineFile, outputs: dict[str, np.ndarray], tensors: dict[str, np.ndarray], batch: int, session=None) -> None:
        spec = pipeline.spec
        net_size = (spec.preprocess.resize.width, spec.preprocess.resize.height)
        self.by_slot = []
        for slot in range(batch):
            views = {name: array[slot : slot + 1] if batch > 1 else array for name, array in outputs.items()}
            self.by_slot.append(
                create_postprocessor(
                    spec.postprocess,
                    views,
                    net_size,
                    tensors,
                    pipeline.class_names(),
                    session=session,  # a CUDA session exists only for one camera (one slot)
                    plugin_folder=pipeline.plugin_folder(),
                )
            )
        self._stack = ExitStack()

    def __enter__(self) -> Decoding:
        for decoder in self.by_slot:
            if hasattr(decoder, "__enter__"):
                self._stack.enter_context(decoder)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def describe(self) -> str:
        """What decoded the frames and where NMS ran, for the report."""
        return describe(self.by_slot[0])


class Cascading:
    """The cascade steps (`cascade:`): models run on the crops of the detections, results attached to them
    (sdk.cascade); their time is the postprocess stage's. Without a `cascade` section it passes detections through."""

    name = "cascade"

    def __init__(self, pipeline: PipelineFile, tensors: dict[str, np.ndarray] | None = None) -> None:
        self._stage = None
        if pipeline.spec.cascade:
            from sdk.cascade import CascadeStage

            self._stage = CascadeStage(pipeline.spec.cascade, pipeline.folder, tensors)

    def __enter__(self) -> Cascading:
        if self._stage is not None:
            self._stage.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._stage is not None:
            self._stage.__exit__(*exc)

    def __call__(self, image: np.ndarray, detections):
        return detections if self._stage is None else self._stage(image, detections)

    def latencies_ms(self) -> dict[str, list[float]]:
        return self._stage.latencies_ms() if self._stage is not None else {}


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


__all__ = [
    "Cascading",
    "Decoding",
    "Preprocessing",
    "Tracking",
    "batch_slots",
    "create_feed",
    "create_preprocessor",
    "describe_batching",
    "open_cameras",
]
