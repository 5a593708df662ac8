"""Apply a pruning plan to a copy of the graph: fewer output channels where each space is produced, the same
channels sliced from every per-channel parameter on the way (batch norm, depthwise convolutions, per-channel
constants), fewer input channels in every consumer, whose weights are the refit where one is given."""

from __future__ import annotations

import numpy as np

from tools.optimize.channels import Channels, kept_channels
from tools.optimize.graph import Graph


def apply_plan(graph: Graph, channels: Channels, keep: dict[int, np.ndarray], refits: dict[str, np.ndarray] | None = None) -> Graph:
    """A pruned copy. `keep`: space -> kept channel indices (spaces absent keep all). `refits`: consumer node ->
    its refitted augmented weights [O, kept input columns + 1] (the bias last), from reconstruct.refit."""
    pruned = graph.copy()
    refits = refits or {}
    layout = {name for name in channels.layout}
    for node in pruned.nodes:
        if node.op_type == "Conv":
            _conv(pruned, channels, node, keep, refits.get(node.name), layout)
        elif node.op_type == "BatchNormalization" and node.input[0] in layout:
            kept = kept_channels(channels, node.input[0], keep)
            for name in node.input[1:5]:
                pruned.set_weight(name, pruned.weights[name][kept])
        elif node.input and any(t in pruned.weights and pruned.weights[t].size > 1 for t in node.input):
            sources = [t for t in pruned.activations(node) if t in layout]
            if len(sources) == 1 and node.op_type not in ("Conv", "Reshape", "Resize", "Upsample", "Clip"):
                kept = kept_channels(channels, sources[0], keep)
                for name in node.input:
                    value = pruned.weights.get(name)
                    if value is not None and value.size > 1 and value.ndim >= 3 and value.shape[-3] == value.size:
                        pruned.set_weight(name, np.take(value, kept, axis=value.ndim - 3))
    return pruned


def _conv(graph: Graph, channels: Channels, node, keep: dict[int, np.ndarray], refit: np.ndarray | None, layout: set[str]) -> None:
    info = graph.conv(node)
    weight = graph.weights[info.weight]
    bias = graph.weights[info.bias] if info.bias else None
    source = node.input[0]
    if graph.is_depthwise(node) and source in layout:
        kept = kept_channels(channels, source, keep)
        graph.set_weight(info.weight, weight[kept])
        if bias is not None:
            graph.set_weight(info.bias, bias[kept])
        graph.groups[node.name] = len(kept)
        return
    if refit is not None:
        kept_in = kept_channels(channels, source, keep)
        weight = refit[:, :-1].reshape(weight.shape[0], len(kept_in), *weight.shape[2:]).astype(np.float32)
        bias = refit[:, -1].astype(np.float32)
        if info.bias is None:
            add_bias(graph, node, bias)
            info = graph.conv(node)
    elif source in layout and info.group == 1:
        weight = weight[:, kept_channels(channels, source, keep)]
    out_kept = kept_channels(channels, node.output[0], keep)
    graph.set_weight(info.weight, weight[out_kept])
    if info.bias is not None:
        graph.set_weight(info.bias, (bias if bias is not None else graph.weights[info.bias])[out_kept])


def add_bias(graph: Graph, node, bias: np.ndarray) -> str:
    """Give a Conv without a bias one (a refit's constant term has to go somewhere)."""
    name = _unique(graph, f"{node.name}/bias")
    graph.weights[name] = np.asarray(bias, np.float32)
    graph.changed.add(name)
    initializer = graph.model.graph.initializer.add()
    initializer.name = name
    node.input.append(name)
    return name


def _unique(graph: Graph, name: str) -> str:
    taken = set(graph.weights) | {t for node in graph.nodes for t in node.output}
    candidate, number = name, 1
    while candidate in taken:
        number += 1
        candidate = f"{name}_{number}"
    return candidate
