"""`sdk predict MODEL.onnx`: a bare ONNX file predicted without a pipeline.

Latency needs static shapes. A bare file's batch dimension (the first of each input) is set to `--batch` (1 when not
given) where it is open; an input with another open dimension is refused (a pipeline's `model.prepare.inputs` fixes
those). A file whose batch is fixed keeps it, and a `--batch` that differs from it is refused: changing it would
break the model's own reshapes. The file is never written over: a model whose shapes were set is written to the
cache, named by its content and batch.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from sdk.errors import ConfigError
from tools.perf.layers import ModelLayers

MAX_BATCH = 4096  # TensorRT's (and the DLA's) largest batch


def is_onnx(path: Path) -> bool:
    return Path(path).suffix.lower() == ".onnx"


def bare_layers(path: Path, batch: int | None) -> ModelLayers:
    """The layers of a bare ONNX file at `batch`, or one ConfigError/ModelError naming the file and the bad value."""
    import onnx

    from tools.dla.graph import load_inferred
    from tools.perf.layers import _run_shapes, layers_of

    if batch is not None and not 1 <= batch <= MAX_BATCH:
        raise ConfigError(f"--batch {batch} is out of range; allowed: 1 to {MAX_BATCH}", hint="the frames one inference call takes")
    if not path.is_file():
        raise ConfigError(f"{path}: no such file", hint="give a pipeline (YAML) or an ONNX model file")
    model = load_inferred(path)
    weights = {i.name for i in model.graph.initializer}
    changed = False
    for value in model.graph.input:
        if value.name in weights:
            continue
        dims = value.type.tensor_type.shape.dim
        shown = "x".join(str(d.dim_value) if d.HasField("dim_value") and d.dim_value > 0 else (d.dim_param or "?") for d in dims)
        for i, dim in enumerate(dims):
            fixed = dim.HasField("dim_value") and dim.dim_value > 0
            if i == 0 and not fixed:
                dim.Clear()
                dim.dim_value = batch or 1
                changed = True
            elif i == 0 and batch is not None and dim.dim_value != batch:
                raise ConfigError(
                    f"{path}: input {value.name!r} has a fixed batch of {dim.dim_value} ({shown}); --batch {batch} needs an open one",
                    hint=f"leave out --batch (it predicts batch {dim.dim_value}), or export the model with a dynamic batch",
                )
            elif not fixed:
                raise ConfigError(
                    f"{path}: input {value.name!r} has an open dimension {i} ({shown}); a prediction needs static shapes",
                    hint="predict a pipeline whose model.prepare.inputs fixes it, or export the model with a fixed input size",
                )
    if not changed:
        return layers_of(model, str(path), _run_shapes(model))
    for output in model.graph.output:
        output.type.tensor_type.ClearField("shape")
    del model.graph.value_info[:]
    fixed_model = onnx.shape_inference.infer_shapes(model, data_prop=True)
    written = _cached_copy(path, fixed_model, batch or 1)
    return layers_of(fixed_model, str(written), _run_shapes(fixed_model))


def _cached_copy(path: Path, model, batch: int) -> Path:
    """The model with its batch set, in the cache (the DLA placement reads the model from a file)."""
    import onnx

    from tools.state import cache_dir

    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    folder = cache_dir() / "predict"
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / f"{path.stem}-{digest}-b{batch}.onnx"
    if not out.is_file():
        partial = out.with_suffix(".partial")
        onnx.save(model, str(partial))
        partial.replace(out)
    return out
