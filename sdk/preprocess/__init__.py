"""Preprocessing: the geometry plan (shared with the CUDA kernels) and the OpenCV CPU path."""

from sdk.preprocess.cpu import CpuPreprocessor
from sdk.preprocess.geometry import ResizeGeometry

__all__ = ["CpuPreprocessor", "ResizeGeometry"]
