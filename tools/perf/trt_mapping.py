"""TensorRT's reported layers mapped back to the prepared model's layers.

TensorRT names a layer after the ONNX nodes it holds: a fusion joins them ("conv1 + bn1 + relu1"), a pointwise
fusion nests them ("PWN(PWN(sig, mul), add)"), a reformat names the layer it feeds ("Reformatting CopyNode for Input
Tensor 0 to conv1"), and a DLA subgraph is one foreign node naming its first and last layer ("{ForeignNode[conv1...
relu5]}"): its inside is the DLA subgraph of the placement prediction (tools/dla) that holds those layers, else every
layer between the two in the model's order. Each reported layer becomes a measured layer of the prepared layers it
names (a reformat joins the layer it feeds: it is that layer's cost); a prepared layer no report names (folded,
fused away) joins its nearest named neighbour, as on ONNX Runtime.
"""

from __future__ import annotations

import re

from tools.perf.layers import ModelLayers
from tools.perf.mapping import MeasuredLayer, _absorb

FOREIGN = re.compile(r"\{ForeignNode\[(.*)\.\.\.(.*)\]\}")
REFORMAT = re.compile(r"^Reformatting CopyNode for (?:Input|Output) Tensor \d+ to (.+)$")
SPLIT = re.compile(r" \+ |PWN\(|\)|, ")


def named_layers(name: str, model: ModelLayers, placement=None) -> tuple[list[str], str]:
    """(the prepared layers a TensorRT layer name holds, its kind: layer, reformat, foreign)."""
    names = model.by_name()
    reformat = REFORMAT.match(name.strip())
    if reformat:  # the layer it feeds may itself be a foreign node
        return named_layers(reformat.group(1).strip(), model, placement)[0], "reformat"
    foreign = FOREIGN.search(name)
    if foreign:
        first, last = foreign.group(1).strip(), foreign.group(2).strip()
        return _subgraph(first, last, model, placement), "foreign"
    return [t for t in _tokens(name) if t in names], "layer"


def _tokens(name: str) -> list[str]:
    return [t.strip() for t in SPLIT.split(name) if t and t.strip()]


def _subgraph(first: str, last: str, model: ModelLayers, placement) -> list[str]:
    names = model.by_name()
    if placement is not None:
        for group in placement.subgraphs:
            members = [placement.layers[i].name for i in group]
            if first in members or last in members:
                return members
    if first in names and last in names:
        low, high = sorted((names[first].index, names[last].index))
        return [layer.name for layer in model.layers[low : high + 1]]
    return [n for n in (first, last) if n in names]


def map_tensorrt(model: ModelLayers, nodes: list[dict], placement=None) -> tuple[MeasuredLayer, ...]:
    """Group TensorRT's reported layers (`nodes`: name, op in execution order) by the prepared layers they hold."""
    order = {layer.name: layer.index for layer in model.layers}
    claimed: dict[str, int] = {}  # prepared layer -> measured group
    groups: list[dict] = []
    pending: list[dict] = []  # reformats before the layer they feed
    for node in nodes:
        members, kind = named_layers(node["name"], model, placement)
        if kind == "reformat":
            known = [m for m in members if m in claimed]
            if known:
                groups[claimed[known[0]]]["executed"].append(node)
            else:
                pending.append(node)
            continue
        fresh = [m for m in members if m not in claimed]
        if not fresh and members:
            groups[claimed[members[0]]]["executed"].append(node)
            continue
        if not fresh:  # a layer of TensorRT's own (a shape computation): joins the last group
            (groups[-1]["executed"] if groups else pending).append(node)
            continue
        group = {"members": fresh, "executed": [*pending, node], "foreign": kind == "foreign"}
        pending = []
        for member in fresh:
            claimed[member] = len(groups)
        groups.append(group)
    if pending and groups:
        groups[-1]["executed"].extend(pending)
    anchors = {}
    for i, group in enumerate(groups):
        layers = [model.by_name()[m] for m in group["members"]]
        anchors[max(layers, key=lambda layer: (layer.flops, -layer.index)).name] = i
    owner = _absorb(model, set(anchors), set(), {m: _anchor_of(claimed[m], anchors) for m in claimed})
    members: dict[str, list[str]] = {a: [] for a in anchors}
    for layer in model.layers:
        members[owner[layer.name]].append(layer.name)
    found = []
    for anchor, i in sorted(anchors.items(), key=lambda item: item[1]):
        executed = groups[i]["executed"]
        found.append(MeasuredLayer(anchor, tuple(sorted(members[anchor], key=order.get)), tuple(n["name"] for n in executed),
                                   tuple(n.get("op") or "" for n in executed)))  # fmt: skip
    return tuple(found)


def _anchor_of(group: int, anchors: dict[str, int]) -> str:
    return next(name for name, i in anchors.items() if i == group)
