"""The preprocess stage of a run: a preprocessor per camera, each writing its batch slot of the model's input.

One camera is a set of one. `preprocess.device` chooses CPU (OpenCV) or CUDA once for the pipeline; on CUDA this
stage opens the pipeline's one CUDA session (one stream, one engine) and is its one owner: every camera's kernel
writes its slot of the engine's input through it (decision 0460), the decoders on the device read the outputs
through it, and it is closed last. A preprocessor is bound to its slot's view of the input buffer once; nothing is
allocated per frame.
"""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

from sdk.preprocess.cpu import CpuPreprocessor
from sdk.spec.loader import PipelineFile


def camera_preprocessor(spec, backend, choice, image_input: str, batch: int, slot: int, kernels_dir: Path | None, session=None):
    """One camera's preprocessor writing batch slot `slot` of `batch`: the CUDA kernel through `session` (the
    pipeline's one CUDA session), or OpenCV on the CPU into the slot's view of the input buffer."""
    if session is not None:
        from sdk.preprocess.cuda import CudaPreprocessor

        return CudaPreprocessor(spec, backend, choice, image_input=image_input, kernels_dir=kernels_dir, session=session, slot=slot, batch=batch)
    output = backend.inputs[image_input]
    stage = CpuPreprocessor(spec, output[slot : slot + 1] if batch > 1 else output)
    stage.choice = choice
    return stage


class Preprocessing:
    """A preprocessor per camera, each writing into its slot of the model input; the owner of the CUDA session."""

    name = "preprocess"

    def __init__(self, pipeline: PipelineFile, backend, image_input: str, batch: int, kernels_dir: Path | None = None) -> None:
        from sdk.preprocess.cuda import choose_device

        spec = pipeline.spec
        self.by_camera = []
        self._stack = ExitStack()
        self._pipeline_cameras = tuple(spec.cameras)
        self._several = spec.multi_camera
        self.choice = choose_device(spec.preprocess.device, backend, kernels_dir, f"{pipeline.path}: preprocess.device")
        # The CUDA session the decoders run on the engine's outputs with, else None (the CPU). One frame's work as one
        # CUDA graph (preprocess.cuda_graph) is captured for one camera; several cameras run it un-captured.
        self.session = None
        if self.choice.device == "cuda":
            from sdk.gpu.session import CudaSession

            self.session = CudaSession(self.choice, backend, kernels_dir, cuda_graph=spec.preprocess.cuda_graph and not self._several)
        try:
            for index, camera in enumerate(spec.cameras):
                slot = index if batch > 1 else 0
                camera_spec = spec.preprocess_for(camera)
                self.by_camera.append(camera_preprocessor(camera_spec, backend, self.choice, image_input, batch, slot, kernels_dir, self.session))
        except BaseException:
            self._close_session()
            raise

    def _close_session(self) -> None:
        if self.session is not None:
            self.session.close()
            self.session = None

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
            self._close_session()

    def describe(self) -> str:
        return self.by_camera[0].describe()

    def report(self) -> dict:
        """The report's `preprocess` section: the device used, why, and how (the first camera's: they all agree;
        with several cameras on CUDA each camera's kernel and source format under `cameras`)."""
        section = self.by_camera[0].report()
        if self._several and self.session is not None:
            section["cameras"] = {
                name: {"slot": stage.slot, "kernel": getattr(stage.plan, "kernel", None), "source_format": getattr(stage.plan, "source_format", None)}
                for name, stage in zip(self._pipeline_cameras, self.by_camera, strict=True)
            }
        return section


def create_preprocessing(pipeline: PipelineFile, backend, image_input: str, batch: int, kernels_dir: Path | None = None) -> Preprocessing:
    """The preprocess stage for the pipeline's cameras (one camera is a set of one)."""
    return Preprocessing(pipeline, backend, image_input, batch, kernels_dir)


__all__ = ["Preprocessing", "camera_preprocessor", "create_preprocessing"]
