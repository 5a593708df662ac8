"""Inference backends, created by name; heavy modules load inside the backend that needs them."""

from __future__ import annotations

from pathlib import Path

from sdk.backends.base import Backend, TensorSpec
from sdk.errors import ConfigError

BACKENDS = ("onnxruntime",)


def create_backend(name: str, model_path: Path, *, threads: int | None = None) -> Backend:
    """`auto` picks the best backend installed for the model; today that is ONNX Runtime on CPU."""
    if name in ("auto", "onnxruntime"):
        from sdk.backends.onnxruntime_cpu import OnnxRuntimeBackend

        return OnnxRuntimeBackend(model_path, threads=threads)
    raise ConfigError(f"model.backend: unknown backend {name!r}; allowed: auto, {', '.join(BACKENDS)}")


__all__ = ["BACKENDS", "Backend", "TensorSpec", "create_backend"]
