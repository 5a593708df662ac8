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


def create_preprocessor(
    pipeline: PipelineFile, camera: str, backend, image_input: str, batch: int, slot: int, kernels_dir: Path | None, session=None
):
    """The one place a preprocessor is made: sdk.preprocess chooses CPU or CUDA (preprocess.device) for one camera;
    with several cameras `session` (the pipeline's one CUDA session, or None on the CPU) decides, and the camera
    writes its batch slot of the input (decision 0460)."""
    from sdk.preprocess import create_preprocessor as chosen

    spec = pipeline.spec.preprocess_for(camera)
    where = f"{pipeline.path}: preprocess.device"
    if not pipeline.spec.multi_camera:
        return chosen(spec, backend, image_input=image_input, kernels_dir=kernels_dir, where=where)
    if session is not None:
        from sdk.preprocess.cuda import CudaPreprocessor

        return CudaPreprocessor(
            spec, backend, session.choice, image_input=image_input, kernels_dir=kernels_dir, session=session, slot=slot, batch=batch
        )
    from sdk.preprocess import CpuPreprocessor

    output = backend.inputs[image_input]
    return CpuPreprocessor(spec, output[slot : slot + 1] if batch > 1 else output)


def open_several_cameras_session(pipeline: PipelineFile, backend, kernels_dir: Path | None):
    """(choice, session) of a pipeline with several cameras: one CUDA session (one stream, one engine) that every
    camera's kernel writes its slot through where preprocess.device chooses cuda, else None (the CPU)."""
    from sdk.gpu.session import CudaSession
    from sdk.preprocess.cuda import choose_device

    choice = choose_device(pipeline.spec.preprocess.device, backend, kernels_dir, f"{pipeline.path}: preprocess.device")
    return choice, (CudaSession(choice, backend, kernels_dir) if choice.device == "cuda" else None)


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
        self._stack = ExitStack()
        self._pipeline_cameras = tuple(spec.cameras)
        self._shared = None  # several cameras on CUDA: the one session they share (closed last)
        choice = None
        if spec.multi_camera:
            choice, self._shared = open_several_cameras_session(pipeline, backend, kernels_dir)
        try:
            for index, camera in enumerate(spec.cameras):
                slot = index if batch > 1 else 0
                stage = create_preprocessor(pipeline, camera, backend, image_input, batch, slot, kernels_dir, self._shared)
                if choice is not None and self._shared is None:
                    stage.choice = choice
                self.by_camera.append(stage)
        except BaseException:
            self._close_shared()
            raise

    @property
    def session(self):
        """The CUDA session the decoders run on the engine's outputs with (one camera's, or the shared one of
        several cameras), else None."""
        if self._shared is not None:
            return self._shared
        return getattr(self.by_camera[0], "session", None) if len(self.by_camera) == 1 else None

    def _close_shared(self) -> None:
        if self._shared is not None:
            self._shared.close()
            self._shared = None

    def infer_step(self, backend):
        """The infer stage: the backend's infer(), or on the CUDA path the session's: the engine enqueued on the
        stream right after the preprocessing, between its own events (or, with preprocess.cuda_graph, part of
        the frame's graph)."""
        session = self.session
        return session.infer_step if session is not None else backend.infer

    def __enter__(self) -> Preprocessing:
        for preprocessor in self.by_camera:
            self._stack.enter_context(preprocessor)
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self._stack.close()
        finally:
            self._close_shared()

    def describe(self) -> str:
        return self.by_camera[0].describe()

    def report(self) -> dict:
        """The report's `preprocess` section: the device used, why, and how (the first camera's: they all agree;
        with several cameras on CUDA each camera's kernel and source format under `cameras`)."""
        section = self.by_camera[0].report()
        if self._shared is not None:
            section["cameras"] = {
                name: {"slot": stage.slot, "kernel": getattr(stage.plan, "kernel", None), "source_format": getattr(stage.plan, "source_format", None)}
                for name, stage in zip(self._pipeline_cameras, self.by_camera, strict=True)
            }
        return section


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
                    session=session,  # the CUDA session: the decode kernel reads this slot of the outputs in place
                    plugin_folder=pipeline.plugin_folder(),
                    slot=slot,
                )
            )
        self._stack = ExitStack()
        on_device = [decoder for decoder in self.by_slot if hasattr(decoder, "overflow_frames")]
        if session is not None and len(on_device) > 1:
            session.decode = lambda: merged_decode_report(on_device)

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


def merged_decode_report(decoders) -> dict:
    """The decode report of several batch slots decoded on the device: counts added up, the most candidates the most."""
    section = decoders[0].report()
    section["slots"] = len(decoders)
    section["most_candidates"] = max(d.most_candidates for d in decoders)
    section["overflow_frames"] = sum(d.overflow_frames for d in decoders)
    section["candidates_lost"] = sum(d.candidates_lost for d in decoders)
    return section


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
    "merged_decode_report",
    "open_several_cameras_session",
    "open_cameras",
]
