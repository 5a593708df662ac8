"""The preprocess stage of a run: a preprocessor per camera, each writing its batch slot of the model's input.

One camera is a set of one. `preprocess.device` chooses CPU (OpenCV) or CUDA per pipeline; several cameras on CUDA
share one CUDA session (one stream, one engine) that every camera's kernel writes its slot through (decision 0460).
A preprocessor is bound to its slot's view of the input buffer once; nothing is allocated per frame.
"""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

from sdk.preprocess import CpuPreprocessor, create_preprocessor
from sdk.spec.loader import PipelineFile


def camera_preprocessor(
    pipeline: PipelineFile, camera: str, backend, image_input: str, batch: int, slot: int, kernels_dir: Path | None, session=None
):
    """The one place a preprocessor is made: sdk.preprocess chooses CPU or CUDA (preprocess.device) for one camera;
    with several cameras `session` (the pipeline's one CUDA session, or None on the CPU) decides, and the camera
    writes its batch slot of the input (decision 0460)."""

    spec = pipeline.spec.preprocess_for(camera)
    where = f"{pipeline.path}: preprocess.device"
    if not pipeline.spec.multi_camera:
        return create_preprocessor(spec, backend, image_input=image_input, kernels_dir=kernels_dir, where=where)
    if session is not None:
        from sdk.preprocess.cuda import CudaPreprocessor

        return CudaPreprocessor(
            spec, backend, session.choice, image_input=image_input, kernels_dir=kernels_dir, session=session, slot=slot, batch=batch
        )
    output = backend.inputs[image_input]
    return CpuPreprocessor(spec, output[slot : slot + 1] if batch > 1 else output)


def open_several_cameras_session(pipeline: PipelineFile, backend, kernels_dir: Path | None):
    """(choice, session) of a pipeline with several cameras: one CUDA session (one stream, one engine) that every
    camera's kernel writes its slot through where preprocess.device chooses cuda, else None (the CPU)."""
    from sdk.gpu.session import CudaSession
    from sdk.preprocess.cuda import choose_device

    choice = choose_device(pipeline.spec.preprocess.device, backend, kernels_dir, f"{pipeline.path}: preprocess.device")
    return choice, (CudaSession(choice, backend, kernels_dir) if choice.device == "cuda" else None)


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
                stage = camera_preprocessor(pipeline, camera, backend, image_input, batch, slot, kernels_dir, self._shared)
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


def create_preprocessing(pipeline: PipelineFile, backend, image_input: str, batch: int, kernels_dir: Path | None = None) -> Preprocessing:
    """The preprocess stage for the pipeline's cameras (one camera is a set of one)."""
    return Preprocessing(pipeline, backend, image_input, batch, kernels_dir)


__all__ = ["Preprocessing", "camera_preprocessor", "create_preprocessing", "open_several_cameras_session"]
