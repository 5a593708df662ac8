"""The model's inputs split into the image and the constants of `model.inputs`, the constants written once.

The backend's input buffers are bound once (ONNX Runtime reads the same numpy arrays every frame); a constant
is written into its buffer here, before the first frame, and `Backend.constants_written()` lets a backend that
copies inputs per frame (TensorRT) copy these once instead.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from sdk.errors import ModelError

HINT = "model.inputs names every model input except the image, with its constant value"


def split_inputs(backend, constants: dict[str, tuple[float, ...]], model_path: Path) -> tuple[str, np.ndarray]:
    """(name, buffer) of the image input, after writing every constant of `model.inputs` into its buffer."""
    inputs = backend.inputs
    listing = ", ".join(f"{s.describe()}" for s in backend.input_specs) or "none"
    unknown = sorted(set(constants) - set(inputs))
    if unknown:
        names = ", ".join(map(repr, unknown))
        raise ModelError(f"{model_path}: model.inputs names {names}, which the model does not have; its inputs: {listing}", hint=HINT)
    images = [name for name in inputs if name not in constants]
    if len(images) != 1:
        names = ", ".join(map(repr, images))
        what = f"{len(images)} inputs are not in model.inputs ({names})" if images else "every input is named in model.inputs"
        raise ModelError(f"{model_path}: one input must be the image, but {what}; the model's inputs: {listing}", hint=HINT)
    for name, values in constants.items():
        _write(inputs[name], name, values, model_path)
    backend.constants_written(tuple(constants))
    return images[0], inputs[images[0]]


def _write(buffer: np.ndarray, name: str, values: tuple[float, ...], model_path: Path) -> None:
    given = np.asarray(values, np.float64)
    where = f"{model_path}: model.inputs.{name}"
    if given.size not in (1, buffer.size):
        raise ModelError(
            f"{where}: {given.size} value(s) for an input of shape {list(buffer.shape)} ({buffer.size} elements)",
            hint="give one number (it fills the input) or exactly one per element, in C order",
        )
    kind = buffer.dtype
    if kind == np.bool_:
        if not np.isin(given, (0.0, 1.0)).all():
            raise ModelError(f"{where}: {values} for a boolean input; allowed: 0 or 1 (false or true)", hint=HINT)
    elif np.issubdtype(kind, np.integer):
        info = np.iinfo(kind)
        if not (np.all(given == np.round(given)) and given.min() >= info.min and given.max() <= info.max):
            raise ModelError(f"{where}: {list(values)} for a {kind.name} input; allowed: whole numbers from {info.min} to {info.max}", hint=HINT)
    buffer[...] = given.reshape(buffer.shape) if given.size == buffer.size else given[0]


__all__ = ["split_inputs"]
