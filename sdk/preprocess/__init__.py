"""Preprocessing: the geometry plan (shared with the CUDA kernels), the OpenCV CPU path, and the CUDA path."""

from __future__ import annotations

from pathlib import Path

from sdk.preprocess.cpu import CpuPreprocessor
from sdk.preprocess.geometry import ResizeGeometry


def create_preprocessor(spec, backend, *, kernels_dir: Path | None = None, where: str = "preprocess.device", int8_scale: float | None = None):
    """The stage `preprocess.device` asks for, writing `backend`'s one input: CpuPreprocessor, or
    CudaPreprocessor (sdk/preprocess/cuda.py) into the engine's input binding. Both take a frame and
    return its geometry, and report() names the device used and why."""
    from sdk.errors import ModelError
    from sdk.preprocess.cuda import CudaPreprocessor, choose_device

    if len(backend.inputs) != 1:
        raise ModelError(f"the model must have one input, it has {len(backend.inputs)}")
    choice = choose_device(spec.device, backend, kernels_dir, where)
    if choice.device == "cuda":
        return CudaPreprocessor(spec, backend, choice, kernels_dir=kernels_dir, int8_scale=int8_scale)
    ((_, buffer),) = backend.inputs.items()
    stage = CpuPreprocessor(spec, buffer)
    stage.choice = choice
    return stage


__all__ = ["CpuPreprocessor", "ResizeGeometry", "create_preprocessor"]
