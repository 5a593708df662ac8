"""How many channels each space keeps: by predicted time saved on the target per unit of reconstruction error.

FLOPs are not latency: the time of a channel count comes from the performance model (tools/perf) of the target
(this CPU's measured peaks, or a module's GPU at the build's precision), run on the model's layers with the counts
changed (`resized`). Counts stay multiples of the alignment (the target precision's tensor-core multiple, and ONNX
Runtime's NCHWc block where the CPU runs the model too). Greedy: each step takes the one space whose next aligned
count saves the most predicted time per unit of added error, until nothing is left to take; every prefix of the
steps is a plan, and a plan per wanted saving is the first prefix that reaches it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from tools.optimize.channels import Channels
from tools.perf.layers import Layer, ModelLayers

MIN_KEEP = 0.25  # a space keeps at least this share of its channels (and at least one alignment unit)
STEPS = 16  # a space's counts go down in steps of about 1/STEPS of its channels (aligned)


def alignment(precision: str, cpu_block: int) -> int:
    """Tensor cores want 8 (FP16) or 32 (INT8) channels; ONNX Runtime's NCHWc kernels a multiple of their block."""
    wanted = 32 if precision == "int8" else 8
    return math.lcm(wanted, cpu_block) if cpu_block else wanted


def counts_for(size: int, align: int) -> list[int]:
    """The aligned counts a space may keep, largest first, about 1/STEPS of its channels apart."""
    floor = max(align, math.ceil(size * MIN_KEEP / align) * align)
    stride = max(align, size // STEPS // align * align)  # about STEPS counts per space, whatever its width
    return [c for c in range(size // align * align, floor - 1, -stride) if c < size]


def resized(model: ModelLayers, channels: Channels, counts: dict[int, int]) -> ModelLayers:
    """The layers with each space's channel count changed: shapes, MACs, FLOPs, weights and elements follow."""
    return Resizer(model, channels)(counts)


class Resizer:
    """`resized` for one model and its channels, asked many times (the allocation predicts hundreds of resized models):
    which spaces each layer's tensors hold is found once, and a layer is made again only for counts of its own spaces
    it has not had before. The same counts give the same layer object, so the performance model's group memo finds it
    at once; what is returned equals `resized`'s."""

    def __init__(self, model: ModelLayers, channels: Channels) -> None:
        self.model = model
        self.spaces: list[tuple[int, ...]] = []  # per layer: the spaces of its 4-D tensors, in a fixed order
        for layer in model.layers:
            found: dict[int, None] = {}
            for tensor, shape in (*zip(layer.inputs, layer.input_shapes, strict=False), *zip(layer.outputs, layer.output_shapes, strict=False)):
                if len(shape) == 4:
                    found.update(dict.fromkeys(s.space for s in channels.segments(tensor)))
            self.spaces.append(tuple(found))
        self.channels = channels
        self.made: dict[tuple, Layer] = {}

    def __call__(self, counts: dict[int, int]) -> ModelLayers:
        layers = []
        for index, (layer, spaces) in enumerate(zip(self.model.layers, self.spaces, strict=True)):
            own = tuple(counts.get(s) for s in spaces)
            if not any(c is not None for c in own):
                layers.append(layer)
                continue
            key = (index, own)
            made = self.made.get(key)
            if made is None:
                made = self.made[key] = self._layer(layer, counts)
            layers.append(made)
        return replace(self.model, layers=tuple(layers))

    def _layer(self, layer: Layer, counts: dict[int, int]) -> Layer:
        def channels_of(tensor: str, shape: tuple[int, ...]) -> tuple[int, ...]:
            segments = self.channels.segments(tensor)
            if len(shape) != 4 or not segments:
                return shape
            return (shape[0], sum(counts.get(s.space, s.size) for s in segments), *shape[2:])

        ins = tuple(channels_of(t, s) for t, s in zip(layer.inputs, layer.input_shapes, strict=False))
        outs = tuple(channels_of(t, s) for t, s in zip(layer.outputs, layer.output_shapes, strict=False))
        if ins == layer.input_shapes and outs == layer.output_shapes:
            return layer
        return _resized_layer(layer, ins, outs)


def _resized_layer(layer: Layer, ins: tuple, outs: tuple) -> Layer:
    out_elements = sum(math.prod(s) for s in outs if s)
    in_elements = sum(math.prod(s) for s in ins if s)
    if layer.op == "Conv" and layer.channels and ins and outs:
        old_in, old_out = layer.channels
        kernel = math.prod(layer.kernel) if layer.kernel else 1
        c_in, c_out = ins[0][1], outs[0][1]
        groups = c_in if layer.op_class == "conv_depthwise" else layer.groups
        bias = max(layer.weight_elements - old_out * (old_in // max(layer.groups, 1)) * kernel, 0)
        macs = math.prod(outs[0]) * (c_in // max(groups, 1)) * kernel
        return replace(
            layer, input_shapes=ins, output_shapes=outs, channels=(c_in, c_out), groups=groups, macs=macs,
            flops=2 * macs + (math.prod(outs[0]) if bias else 0), weight_elements=c_out * (c_in // max(groups, 1)) * kernel + (c_out if bias else 0),
            input_elements=in_elements, output_elements=out_elements,
        )  # fmt: skip
    ratio = out_elements / layer.output_elements if layer.output_elements else 1.0
    return replace(
        layer, input_shapes=ins, output_shapes=outs, macs=int(layer.macs * ratio), flops=int(layer.flops * ratio),
        weight_elements=int(layer.weight_elements * ratio), input_elements=in_elements, output_elements=out_elements,
    )  # fmt: skip


@dataclass(frozen=True)
class Step:
    space: int
    count: int  # what the space keeps after this step
    ms: float  # predicted time of the whole model after it
    error: float  # summed reconstruction error after it


def allocate(spaces: dict[int, int], errors: dict[int, Callable[[int], float]], predict: Callable[[dict[int, int]], float],
             limit: int = 400, saving: float | None = None) -> tuple[float, list[Step]]:  # fmt: skip
    """The greedy steps from the full model. `spaces`: space -> its aligned counts, largest first (counts_for);
    `errors[space](count)`: the error of keeping `count`; `predict(counts)`: the model's predicted ms. `saving`: stop
    once the predicted time is at most (1 - saving) of the full model's (each step saves time, so the steps after it
    would change no plan of that saving or less); None: until `limit` or nothing more saves time."""
    counts: dict[int, int] = {}
    position = dict.fromkeys(spaces, 0)
    base = predict({})
    current, total = base, 0.0
    cached: dict[int, tuple[int, float, float]] = {}  # space -> (its next position, time saved, error added)
    steps: list[Step] = []
    while len(steps) < limit and (saving is None or current > base * (1 - saving)):
        best, best_value = None, -1.0
        for space, options in sorted(spaces.items()):
            if position[space] >= len(options):
                continue
            if space not in cached:
                cached[space] = _next_step(space, options, position[space], counts, current, errors[space], predict)
            _, saved, added = cached[space]
            if saved <= 0:
                continue
            value = saved / max(added, 1e-9)
            if value > best_value:
                best, best_value = space, value
        if best is None:
            break
        position[best], _, added = cached.pop(best)
        count = spaces[best][position[best]]
        position[best] += 1
        total += added
        counts[best] = count
        current = predict(counts)
        steps.append(Step(best, count, current, total))
    return base, steps


def _next_step(space: int, options: list[int], start: int, counts: dict[int, int], current: float, error, predict) -> tuple[int, float, float]:
    """The space's next count that saves predicted time (a launch-bound layer saves nothing until its count crosses a
    threshold, so the counts in between are skipped over): (its position, time saved, error added)."""
    before = error(counts.get(space, 10**9))
    for index in range(start, len(options)):
        saved = current - predict({**counts, space: options[index]})
        if saved > 1e-9:
            return index, saved, max(error(options[index]) - before, 0.0)
    return len(options), 0.0, 0.0


def plan_at(steps: list[Step], base: float, saving: float) -> dict[int, int] | None:
    """The counts of the first prefix of steps whose predicted time is at most (1 - saving) of the base, or None."""
    counts: dict[int, int] = {}
    for step in steps:
        counts[step.space] = step.count
        if step.ms <= base * (1 - saving):
            return dict(counts)
    return None
