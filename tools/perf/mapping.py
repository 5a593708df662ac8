"""ONNX Runtime's executed nodes mapped back to the prepared model's layers.

ONNX Runtime runs an optimised graph: it fuses (Conv + activation, Sigmoid + Mul as QuickGelu, Slices + Concat as
SpaceToDepth + Gather), changes layouts (NCHWc convolutions with Reorder nodes around them) and renames. Each executed
node is tied to one prepared layer, its anchor, by what ONNX Runtime keeps of the names: the layer's own name; a
fusion's name "<layer>/<Fusion>/"; an NCHWc node "<layer or its output tensor>_nchwc"; an output tensor the layer
writes. A node with none of these (a Reorder, a pattern's new node) takes the anchor of its nearest neighbour in the
optimised graph (a ReorderInput its consumer's, others their producer's first). A prepared layer that anchors no node
was fused into (or folded away beside) a neighbour: it joins the nearest anchored layer, a fused one first. The result
is one measured layer per anchor, named with every prepared layer it holds: every executed node lands on a layer.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from pathlib import Path

from tools.perf.layers import ModelLayers

FUSED_OPS = {"FusedConv", "FusedGemm", "FusedMatMul", "QuickGelu", "Gelu", "BiasGelu", "FastGelu", "SkipLayerNormalization",
             "LayerNormalization", "SimplifiedLayerNormalization", "SpaceToDepth", "DepthToSpace", "Attention", "MultiHeadAttention",
             "BiasAdd", "HardSwish", "Swish"}  # fmt: skip


CONV_OPS = ("Conv", "FusedConv")


@dataclass(frozen=True)
class ExecutedNode:
    name: str
    op: str
    domain: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    activation: str = ""  # an NCHWc or FusedConv node's fused activation


@dataclass(frozen=True)
class MeasuredLayer:
    anchor: str  # the prepared layer that names it
    members: tuple[str, ...]  # every prepared layer it holds, in the model's order (the anchor among them)
    executed: tuple[str, ...]  # ONNX Runtime's nodes that ran it
    executed_ops: tuple[str, ...]

    @property
    def name(self) -> str:
        return " + ".join(self.members) if self.members else self.anchor


def read_optimized(path: Path) -> tuple[ExecutedNode, ...]:
    """The nodes of the graph ONNX Runtime ran (written by the device's profile as optimized.onnx)."""
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    nodes = []
    for node in graph.node:
        activation = next((a.s.decode() for a in node.attribute if a.name == "activation"), "")
        nodes.append(ExecutedNode(node.name, node.op_type, node.domain, tuple(node.input), tuple(node.output), activation))
    return tuple(nodes)


def _name_anchor(node: ExecutedNode, names: set[str], producer: dict[str, str]) -> str | None:
    if node.name in names:
        return node.name
    if node.name.endswith("_nchwc"):
        base = node.name[: -len("_nchwc")]
        if base in names:
            return base
        if base in producer:
            return producer[base]
    head = node.name.split("/")[0]
    if head in names:
        return head
    for tensor in node.outputs:
        if tensor in producer:
            return producer[tensor]
    return None


def _neighbour_anchor(index: int, nodes: tuple[ExecutedNode, ...], anchors: list[str | None]) -> str | None:
    """The anchor of the nearest anchored node in the optimised graph (a ReorderInput looks at its consumers first)."""
    producer = {t: i for i, n in enumerate(nodes) for t in n.outputs}
    consumers: dict[str, list[int]] = {}
    for i, n in enumerate(nodes):
        for t in n.inputs:
            consumers.setdefault(t, []).append(i)

    def before(i: int) -> list[int]:
        return [producer[t] for t in nodes[i].inputs if t in producer]

    def after(i: int) -> list[int]:
        return [c for t in nodes[i].outputs for c in consumers.get(t, [])]

    first, second = (after, before) if nodes[index].op == "ReorderInput" else (before, after)
    for direction in (first, second):
        seen, queue = {index}, deque(direction(index))
        while queue:
            i = queue.popleft()
            if i in seen:
                continue
            seen.add(i)
            if anchors[i] is not None:
                return anchors[i]
            queue.extend(direction(i))
    return next((a for a in reversed(anchors[:index]) if a is not None), None)


def map_executed(layers: ModelLayers, nodes: tuple[ExecutedNode, ...]) -> tuple[MeasuredLayer, ...]:
    """Group the executed nodes by prepared layer; every executed node and every prepared layer lands in one group."""
    names = {layer.name for layer in layers.layers}
    producer = {t: layer.name for layer in layers.layers for t in layer.outputs}
    anchors: list[str | None] = [_name_anchor(n, names, producer) for n in nodes]
    claimed: dict[str, str] = {}  # a fused activation (or sum) layer -> the convolution that ran it
    for i, node in enumerate(nodes):
        if anchors[i] is not None and node.op in CONV_OPS:
            chain = _back_to_conv(anchors[i], layers, producer)
            anchors[i] = chain[-1]
            claimed.update({member: chain[-1] for member in chain[:-1]})
    anchors = [claimed.get(a, a) if a is not None else None for a in anchors]
    for i in range(len(nodes)):
        if anchors[i] is None:
            anchors[i] = _neighbour_anchor(i, nodes, anchors)
    if not any(anchors):  # nothing of the prepared model's names survived: one measured layer holds everything
        anchors = [layers.layers[0].name if layers.layers else n.name for n in nodes]
    executed: dict[str, list[int]] = {}
    for i, anchor in enumerate(anchors):
        executed.setdefault(anchor, []).append(i)
    fused = {a for a, idx in executed.items() if any(_is_fusion(nodes[i], a, layers) for i in idx)}
    owner = _absorb(layers, set(executed), fused, claimed)
    members: dict[str, list[str]] = {a: [] for a in executed}
    for layer in layers.layers:
        members[owner[layer.name]].append(layer.name)
    order = {layer.name: layer.index for layer in layers.layers}
    groups = sorted(executed.items(), key=lambda item: min(item[1]))
    return tuple(
        MeasuredLayer(anchor, tuple(sorted(members[anchor], key=order.get)), tuple(nodes[i].name for i in idx), tuple(nodes[i].op for i in idx))
        for anchor, idx in groups
    )


def _is_fusion(node: ExecutedNode, anchor: str, layers: ModelLayers) -> bool:
    layer = layers.by_name().get(anchor)
    return (
        bool(node.activation)
        or node.op in FUSED_OPS
        or "/" in node.name
        or (layer is not None and layer.op != node.op and node.op not in ("ReorderInput", "ReorderOutput"))
    )


def _back_to_conv(anchor: str, layers: ModelLayers, producer: dict[str, str]) -> list[str]:
    """An NCHWc convolution is named after the tensor its fused activation (or sum) writes: from that layer back to the
    convolution, through at most five elementwise or batch-norm layers ([anchor] when the anchor is the convolution)."""
    by_name = layers.by_name()
    chain = [anchor]
    while by_name[chain[-1]].op not in ("Conv", "ConvTranspose") and len(chain) < 6:
        layer = by_name[chain[-1]]
        if layer.op_class not in ("elementwise", "normalization"):
            return [anchor]
        sources = [producer[t] for t in layer.inputs if t in producer]
        convs = [s for s in sources if by_name[s].op in ("Conv", "ConvTranspose")]
        if not (convs or sources):
            return [anchor]
        chain.append((convs or sources)[0])
    return chain if by_name[chain[-1]].op in ("Conv", "ConvTranspose") else [anchor]


def _absorb(layers: ModelLayers, anchored: set[str], fused: set[str], claimed: dict[str, str]) -> dict[str, str]:
    """Each prepared layer's measured layer: itself where it anchors one, else the nearest anchored neighbour (a fused
    one first, then the producer's side), searching through other unanchored layers."""
    producer = {t: layer.name for layer in layers.layers for t in layer.outputs}
    consumers: dict[str, list[str]] = {}
    for layer in layers.layers:
        for t in layer.inputs:
            consumers.setdefault(t, []).append(layer.name)
    by_name = layers.by_name()
    owner = {name: name for name in anchored if name in by_name} | claimed
    fallback = next(iter(sorted(anchored)), None)
    for layer in layers.layers:
        if layer.name in owner:
            continue
        found: list[tuple[int, bool, int, str]] = []  # (distance, not fused, consumer side, anchor)
        for side, step in ((0, lambda n: [producer[t] for t in by_name[n].inputs if t in producer]),
                           (1, lambda n: [c for t in by_name[n].outputs for c in consumers.get(t, [])])):  # fmt: skip
            seen, queue = {layer.name}, deque((n, 1) for n in step(layer.name))
            while queue:
                name, distance = queue.popleft()
                if name in seen:
                    continue
                seen.add(name)
                if name in anchored:
                    found.append((distance, name not in fused, side, name))
                    continue
                queue.extend((n, distance + 1) for n in step(name))
        owner[layer.name] = min(found)[3] if found else fallback
    return owner


def attach_unmapped(groups: tuple[MeasuredLayer, ...], measured: list[str]) -> tuple[MeasuredLayer, ...]:
    """Measured nodes the optimised graph does not hold (the nodes of a Loop's or If's subgraph) join the measured
    layer of the node that ran before them, so that every measured node lands on a layer."""
    from dataclasses import replace

    if not groups:
        return groups
    where = {node: i for i, group in enumerate(groups) for node in group.executed}
    extra: dict[int, list[str]] = {}
    last = 0
    for node in measured:
        if node in where:
            last = where[node]
        else:
            extra.setdefault(last, []).append(node)
    return tuple(
        replace(g, executed=(*g.executed, *extra.get(i, ())), executed_ops=(*g.executed_ops, *("",) * len(extra.get(i, ()))))
        for i, g in enumerate(groups)
    )
