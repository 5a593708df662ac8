"""Which output channels can be pruned, and what else must change with them (coupled channels go together).

A *space* is a set of channels that are one: the output channels of a convolution, carried unchanged through
per-channel operations (activations, batch norm, a depthwise convolution, pooling, resizing, a per-channel scale).
A residual add (or any elementwise op of two activations) ties its inputs' spaces into one: pruned together, in
every convolution that produces them, or not at all. A concat along the channels lays its inputs' spaces side by
side (each keeps its own channels, at an offset). A convolution (not depthwise) reading a space *consumes* it: its
input channels shrink with the space and its weights are what reconstruction refits.

A space is blocked (never pruned) when it reaches a model output (the detection heads), a graph input, an op whose
channel meaning is unknown here (Reshape, Transpose, Slice, Gemm, a grouped convolution...), or a producer that is
not a plain convolution. Every blocked space says why.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tools.optimize.graph import Graph

# Ops that keep each channel where it is (and need nothing sliced but the weights named in PER_CHANNEL).
UNARY = {"Relu", "Clip", "Sigmoid", "HardSigmoid", "HardSwish", "LeakyRelu", "Tanh", "Elu", "Selu", "Softplus", "Mish",
         "Identity", "Dropout", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "Neg", "Abs", "Exp", "Sqrt",
         "Erf", "Gelu"}  # fmt: skip
BINARY = {"Add", "Sub", "Mul", "Div", "Max", "Min", "Sum", "Pow", "PRelu"}


@dataclass(frozen=True)
class Segment:
    space: int
    offset: int  # where the space's channels start in the tensor
    size: int


@dataclass
class Space:
    """One prunable (or blocked) set of channels."""

    id: int
    size: int
    producers: list[str] = field(default_factory=list)  # Conv nodes whose output channels are this space
    passthrough: list[tuple[str, int]] = field(default_factory=list)  # (node, offset): per-channel parameters sliced
    consumers: list[tuple[str, int]] = field(default_factory=list)  # (Conv node, offset in its input channels)
    tensors: list[str] = field(default_factory=list)
    blocked: list[str] = field(default_factory=list)  # why it cannot be pruned

    @property
    def prunable(self) -> bool:
        return not self.blocked and bool(self.producers) and bool(self.consumers)

    def name(self) -> str:
        return self.producers[0] if self.producers else f"space {self.id}"


class Channels:
    """The spaces of a graph and the channel layout (segments) of every 4-D activation."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.parent: dict[int, int] = {}
        self.sizes: dict[int, int] = {}
        self.layout: dict[str, list[Segment]] = {}
        self.notes: dict[int, list[str]] = {}
        self.roles: dict[int, dict[str, list]] = {}
        self._analyse()
        self.spaces = self._collect()
        self._segments: dict[str, tuple[Segment, ...]] = {}  # the analysis is done: each tensor's segments are final

    # -- union-find over spaces ------------------------------------------------------------------------------
    def _new(self, size: int) -> int:
        sid = len(self.parent)
        self.parent[sid], self.sizes[sid] = sid, size
        self.notes[sid], self.roles[sid] = [], {"producers": [], "passthrough": [], "consumers": [], "tensors": []}
        return sid

    def find(self, sid: int) -> int:
        while self.parent[sid] != sid:
            self.parent[sid] = self.parent[self.parent[sid]]
            sid = self.parent[sid]
        return sid

    def _union(self, a: int, b: int) -> None:
        a, b = self.find(a), self.find(b)
        if a != b:
            self.parent[b] = a
            self.notes[a] += self.notes[b]
            for key, values in self.roles[b].items():
                self.roles[a][key] += values

    def _block(self, tensor: str, why: str) -> None:
        for segment in self.layout.get(tensor, ()):
            self.notes[self.find(segment.space)].append(why)

    # -- the walk ----------------------------------------------------------------------------------------------
    def _analyse(self) -> None:
        g = self.graph
        shapes = _shapes(g)
        for name in g.inputs:
            if len(shapes.get(name, ())) == 4:
                sid = self._new(shapes[name][1])
                self.layout[name] = [Segment(sid, 0, shapes[name][1])]
                self.notes[sid].append(f"the model input {name}")
        for node in g.nodes:
            if node.op_type == "Constant":
                continue
            ins = [t for t in g.activations(node) if t in self.layout]
            out = node.output[0] if node.output else ""
            if node.op_type == "Conv":
                self._conv(node, out, shapes)
            elif node.op_type in UNARY and ins:
                self.layout[out] = list(self.layout[ins[0]])
            elif node.op_type == "BatchNormalization" and ins:
                self._per_channel(node, ins[0], out)
            elif node.op_type in ("Resize", "Upsample") and ins:
                sizes = node.input[3] if node.op_type == "Resize" and len(node.input) > 3 and node.input[3] else None
                if sizes:
                    self._block(ins[0], f"{node.name}: Resize to fixed sizes")
                else:
                    self.layout[out] = list(self.layout[ins[0]])
            elif node.op_type in BINARY and ins:
                self._binary(node, ins, out, shapes)
            elif node.op_type == "Concat" and ins:
                self._concat(node, out, shapes)
            else:
                for tensor in ins:
                    self._block(tensor, f"read by {node.op_type} {node.name}")
            if out in self.layout:
                for segment in self.layout[out]:
                    self.roles[self.find(segment.space)]["tensors"].append(out)
        for name in g.outputs:
            self._block(name, f"reaches the model output {name}")

    def _conv(self, node, out: str, shapes: dict) -> None:
        g = self.graph
        source = node.input[0]
        if g.is_depthwise(node) and source in self.layout:
            self._per_channel(node, source, out)
            return
        info = g.conv(node)
        if source in self.layout:
            if info.group != 1:
                self._block(source, f"read by the grouped convolution {node.name}")
            else:
                for segment in self.layout[source]:
                    self.roles[self.find(segment.space)]["consumers"].append((node.name, segment.offset))
        channels = g.weights[info.weight].shape[0]
        sid = self._new(channels)
        self.layout[out] = [Segment(sid, 0, channels)]
        self.roles[sid]["producers"].append(node.name)
        if info.group != 1:
            self.notes[sid].append(f"{node.name} is a grouped convolution")
        if sum(1 for other in g.nodes if info.weight in other.input) > 1 or (info.bias and sum(1 for o in g.nodes if info.bias in o.input) > 1):
            self.notes[sid].append(f"{node.name} shares its weights")

    def _per_channel(self, node, source: str, out: str) -> None:
        """Batch norm, a depthwise convolution: the channels stay, their parameters are sliced with them."""
        self.layout[out] = list(self.layout[source])
        for segment in self.layout[source]:
            self.roles[self.find(segment.space)]["passthrough"].append((node.name, segment.offset))

    def _binary(self, node, ins: list[str], out: str, shapes: dict) -> None:
        g = self.graph
        constants = [t for t in node.input if t in g.weights]
        for constant in constants:  # a scalar, or one value per channel (sliced with the channels)
            value = g.weights[constant]
            squeezed = [d for d in value.shape if d != 1]
            if value.size > 1 and not (len(value.shape) >= 3 and squeezed and value.shape[-3] == value.size):
                self._block(ins[0], f"{node.name}: a {node.op_type} by a constant of shape {list(value.shape)}")
                return
        if len(ins) == 1 and len(node.input) - len(constants) == 1:
            self.layout[out] = list(self.layout[ins[0]])
            if any(g.weights[c].size > 1 for c in constants):
                for segment in self.layout[ins[0]]:
                    self.roles[self.find(segment.space)]["passthrough"].append((node.name, segment.offset))
            return
        first = self.layout[ins[0]]
        if len(ins) != len(node.input) - len(constants) or any(_sizes(self.layout[t]) != _sizes(first) for t in ins[1:]):
            for tensor in ins:
                self._block(tensor, f"{node.name}: a {node.op_type} of activations laid out differently")
            return
        for tensor in ins[1:]:  # residual sums and gates: the same channel in every input, so one space
            for a, b in zip(first, self.layout[tensor], strict=True):
                self._union(a.space, b.space)
        self.layout[out] = list(first)

    def _concat(self, node, out: str, shapes: dict) -> None:
        g = self.graph
        axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
        ins = [t for t in node.input if t]
        if axis not in (1, -3) or any(t not in self.layout for t in ins):
            for tensor in ins:
                self._block(tensor, f"{node.name}: a Concat along axis {axis}")
            return
        segments, offset = [], 0
        for tensor in ins:
            for segment in self.layout[tensor]:
                segments.append(Segment(segment.space, offset, segment.size))
                offset += segment.size
        self.layout[out] = segments
        del g

    # -- the result --------------------------------------------------------------------------------------------
    def _collect(self) -> dict[int, Space]:
        spaces = {}
        for sid in self.parent:
            root = self.find(sid)
            if root in spaces:
                continue
            roles = self.roles[root]
            spaces[root] = Space(
                root,
                self.sizes[root],
                list(dict.fromkeys(roles["producers"])),
                list(dict.fromkeys(roles["passthrough"])),
                list(dict.fromkeys(roles["consumers"])),
                list(dict.fromkeys(roles["tensors"])),
                list(dict.fromkeys(self.notes[root])),
            )
        return spaces

    def segments(self, tensor: str) -> tuple[Segment, ...]:
        """The tensor's channels, as (space, offset, size) with each space's root id (made once per tensor: `sdk
        optimize` asks for every tensor of every resized model it predicts)."""
        found = self._segments.get(tensor)
        if found is None:
            found = self._segments[tensor] = tuple(Segment(self.find(s.space), s.offset, s.size) for s in self.layout.get(tensor, ()))
        return found

    def prunable(self) -> list[Space]:
        return [s for s in self.spaces.values() if s.prunable]

    def blocked(self) -> list[Space]:
        return [s for s in self.spaces.values() if not s.prunable and s.producers]


def _sizes(segments: list[Segment]) -> list[int]:
    return [s.size for s in segments]


def _shapes(graph: Graph) -> dict[str, tuple[int, ...]]:
    """Static shapes of the model's tensors (inputs, inferred intermediates, outputs)."""
    import onnx

    inferred = onnx.shape_inference.infer_shapes(graph.model)
    shapes = {}
    for info in (*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output):
        dims = info.type.tensor_type.shape.dim
        shapes[info.name] = tuple(d.dim_value if d.HasField("dim_value") else -1 for d in dims)
    return shapes


def kept_channels(channels: Channels, tensor: str, keep: dict[int, np.ndarray]) -> np.ndarray:
    """The indices of a tensor's channels that remain when each space keeps `keep[space]` (all where absent)."""
    parts = []
    for segment in channels.segments(tensor):
        chosen = keep.get(segment.space)
        parts.append(segment.offset + (np.arange(segment.size) if chosen is None else np.asarray(chosen)))
    return np.concatenate(parts) if parts else np.zeros(0, int)
