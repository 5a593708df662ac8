"""Preprocessing: the geometry plan (shared with the CUDA kernels), the OpenCV CPU path, and the CUDA path."""

from __future__ import annotations

from pathlib import Path

from sdk.geometry import ResizeGeometry
from sdk.preprocess.cpu import CpuPreprocessor


def create_preprocessor(
    spec,
    backend,
    *,
    image_input: str | None = None,
    kernels_dir: Path | None = None,
    where: str = "preprocess.device",
    int8_scale: float | None = None,
):
    """The stage `preprocess.device` asks for, writing `backend`'s one input: CpuPreprocessor, or
    CudaPreprocessor (sdk/preprocess/cuda.py) into the engine's input binding. Both take a frame and
    return its geometry, and report() names the device used and why. `image_input`: the input the frames feed when the
    model has constant inputs too (model.inputs, written once by sdk.runtime.constants); else its only input."""
    from sdk.errors import ModelError
    from sdk.preprocess.cuda import CudaPreprocessor, choose_device

    if image_input is None:
        if len(backend.inputs) != 1:
            raise ModelError(f"the model must have one input, it has {len(backend.inputs)}")
        (image_input,) = backend.inputs
    choice = choose_device(spec.device, backend, kernels_dir, where)
    if choice.device == "cuda":
        return CudaPreprocessor(
            spec, backend, choice, image_input=image_input, kernels_dir=kernels_dir, int8_scale=int8_scale, cuda_graph=spec.cuda_graph
        )
    stage = CpuPreprocessor(spec, backend.inputs[image_input])
    stage.choice = choice
    return stage


__all__ = ["CpuPreprocessor", "ResizeGeometry", "create_preprocessor"]
