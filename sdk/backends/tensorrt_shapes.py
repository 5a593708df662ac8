"""The shapes a TensorRT engine runs with, decided in plain Python before the adapter sets them.

An engine built from a plan with a dynamic batch (sdk/engine/build_plan.py: several cameras, profile min 1, opt = max
= the camera count) declares -1 for that dimension. TensorRT runs such an engine only once every dynamic input's
shape is set on the execution context (IExecutionContext::setInputShape, NvInferRuntime.h: "Each dimension must agree
with the network dimension unless the latter was -1"; TensorRT developer guide, "Working with Dynamic Shapes": set
the input dimensions before enqueueV3), inside the optimisation profile's [min, max]; the outputs' shapes then follow
(getTensorShape), and an output still dynamic after that depends on the data, which buffers bound once cannot hold.
The runtime binds its buffers once, so the shape is the batch the pipeline runs: the camera count with
`batch.size: cameras`, else 1 (the frames one after another).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sdk.errors import ModelError

Shape = tuple[int, ...]


@dataclass(frozen=True)
class EngineTensor:
    name: str
    shape: Shape  # as the engine declares it: -1 for a dynamic dimension
    is_input: bool
    profile: tuple[Shape, Shape, Shape] | None = None  # (min, opt, max) of optimisation profile 0, for a dynamic input

    @property
    def dynamic(self) -> bool:
        return any(d < 0 for d in self.shape)


def input_shapes(tensors: tuple[EngineTensor, ...], batch: int, engine: Path | str) -> dict[str, Shape]:
    """The shape to set for every input with a dynamic dimension: the first (batch) dimension = `batch`, checked
    against the engine's profile. Static inputs need none."""
    shapes = {}
    for tensor in tensors:
        if not (tensor.is_input and tensor.dynamic):
            continue
        if any(d < 0 for d in tensor.shape[1:]) or not tensor.shape:
            raise ModelError(
                f"{engine}: input {tensor.name} {list(tensor.shape)} is dynamic beyond its first (batch) dimension",
                hint="prepare the model with static shapes except the batch (model.prepare.inputs)",
            )
        shape = (batch, *tensor.shape[1:])
        if tensor.profile is None:
            raise ModelError(f"{engine}: input {tensor.name} {list(tensor.shape)} is dynamic but the engine has no optimisation profile for it")
        low, _, high = tensor.profile
        if len(low) != len(shape) or not all(lo <= d <= hi for lo, d, hi in zip(low, shape, high, strict=True)):
            raise ModelError(
                f"{engine}: input {tensor.name} takes {list(low)} to {list(high)} (profile 0), the pipeline runs {list(shape)} (batch {batch})",
                hint="build the engine for this pipeline's cameras (deploy builds it from the pipeline file) or set batch.size to match",
            )
        shapes[tensor.name] = shape
    return shapes


def resolved(name: str, shape: Shape, engine: Path | str) -> Shape:
    """A tensor's shape once the inputs' shapes are set: every dimension known, or the engine is refused."""
    if any(d < 0 for d in shape):
        raise ModelError(
            f"{engine}: tensor {name} is still {list(shape)} with every input's shape set: its size depends on the data",
            hint="the runtime binds its buffers once; export the model with a fixed output size (e.g. NMS with a maximum count)",
        )
    return tuple(int(d) for d in shape)


__all__ = ["EngineTensor", "input_shapes", "resolved"]
