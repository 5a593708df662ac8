"""Inference backends, created by name; heavy modules load inside the backend that needs them."""

from __future__ import annotations

from pathlib import Path

from sdk.backends.base import Backend, TensorSpec
from sdk.errors import ConfigError

BACKENDS = ("onnxruntime", "tensorrt")


def create_backend(
    name: str,
    model_path: Path,
    *,
    threads: int | None = None,
    engine_path: Path | None = None,
    declared: tuple[TensorSpec, ...] = (),
    dla_core: int | None = None,
    profile_layers: bool = False,
    cuda_graph: bool = False,
    batch: int = 1,
    spinning: bool = True,
) -> Backend:
    """`tensorrt`: the release's engine (an error without one or without a GPU). `auto`: the engine
    when the release has one and this machine has a CUDA device, else ONNX Runtime on the CPU.
    `batch`: the frames per call a model with a dynamic first (batch) dimension is bound for (an engine built
    with a dynamic batch gets that shape set, within its profile); a static one keeps its own."""
    has_engine = engine_path is not None and Path(engine_path).is_file()
    if name == "tensorrt" or (name == "auto" and has_engine and _cuda_device()):
        if not has_engine:
            raise ConfigError(
                f"model.backend is tensorrt but the release has no engine ({engine_path})",
                hint="deploy to a target with TensorRT: the engine is built there (sdk dla-report shows what it will be)",
            )
        from sdk.backends.tensorrt_gpu import TensorRTBackend

        return TensorRTBackend(engine_path, declared=declared, dla_core=dla_core, profile_layers=profile_layers, cuda_graph=cuda_graph, batch=batch)
    if name in ("auto", "onnxruntime"):
        from sdk.backends.onnxruntime_cpu import OnnxRuntimeBackend

        return OnnxRuntimeBackend(model_path, threads=threads, batch=batch, spinning=spinning)
    raise ConfigError(f"model.backend: unknown backend {name!r}; allowed: auto, {', '.join(BACKENDS)}")


def create_batch_backend(model_path: Path, *, threads: int | None = None, where: str = ""):
    """A model run on batches of any size: a cascade step's crops of one frame. ONNX Runtime on the CPU; the first
    model's engine is bound once to fixed shapes, so a step's model runs here on every target."""
    from sdk.backends.onnxruntime_cpu import OnnxRuntimeBatches

    return OnnxRuntimeBatches(model_path, threads=threads, where=where).open()


def _cuda_device() -> bool:
    from sdk.engine.cuda_check import require_cuda_device
    from sdk.errors import BackendError

    try:
        require_cuda_device(BackendError)
    except BackendError:
        return False
    return True


__all__ = ["BACKENDS", "Backend", "TensorSpec", "create_backend", "create_batch_backend"]
