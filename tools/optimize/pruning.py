"""Channel pruning of one model: the spaces, their elimination orders, and pruned graphs for a plan of counts.

`Pruner` holds the analysis (channels.py), each consumer's input Hessian from the original model (statistics.py)
and each space's elimination (reconstruct.py). For a plan (space -> kept count) it builds:
- `reconstructed`: the channels chosen by elimination, every consumer refitted by least squares on the original's
  inputs (local); the sequential pass (sweep.py) then refits the consumers on the pruned model's own inputs;
- `magnitude`: the baseline, the channels with the largest filter L1 norms, nothing refitted.
"""

from __future__ import annotations

import numpy as np

from tools.optimize.channels import Channels, Space, kept_channels
from tools.optimize.graph import Graph
from tools.optimize.prune import apply_plan
from tools.optimize.reconstruct import Consumer, Elimination, augmented_weights, eliminate, magnitude_kept, refit
from tools.optimize.statistics import Probe
from tools.optimize.sweep import Point


class Pruner:
    def __init__(self, graph: Graph, channels: Channels) -> None:
        self.graph = graph
        self.channels = channels
        self.nodes = {node.name: node for node in graph.nodes}
        self.spaces = {space.id: space for space in channels.prunable()}
        self.hessians: dict[str, np.ndarray] = {}
        self.eliminations: dict[int, Elimination] = {}

    def probes(self) -> list[Probe]:
        """Every consumer of a prunable space, once, in the graph's order."""
        wanted = {node for space in self.spaces.values() for node, _ in space.consumers}
        return [Probe(n.name, n.input[0], self.graph.conv(n)) for n in self.graph.nodes if n.name in wanted]

    def consumers(self, space: Space) -> list[Consumer]:
        found = []
        for name, offset in space.consumers:
            info = self.graph.conv(self.nodes[name])
            bias = self.graph.weights[info.bias] if info.bias else None
            weights = augmented_weights(self.graph.weights[info.weight], bias)
            found.append(Consumer(name, weights, self.hessians[name], offset, info.kernel[0] * info.kernel[1]))
        return found

    def eliminate(self, counts: dict[int, list[int]]) -> None:
        """Each space's elimination through its aligned counts (needs `hessians`), done as far as it is asked about."""
        for sid, options in counts.items():
            if options:
                self.eliminations[sid] = eliminate(self.spaces[sid].size, self.consumers(self.spaces[sid]), options)

    def release(self) -> None:
        """Let go of the eliminations' working inverses once the plans are chosen."""
        for elimination in self.eliminations.values():
            elimination.release()

    def error(self, sid: int, count: int) -> float:
        return self.eliminations[sid].error_at(self.spaces[sid].size, count)

    def keep(self, plan: dict[int, int], method: str) -> dict[int, np.ndarray]:
        keep = {}
        for sid, count in sorted(plan.items()):
            space = self.spaces[sid]
            if count >= space.size:
                continue
            if method == "magnitude":
                producers = [self.graph.weights[self.graph.conv(self.nodes[p]).weight] for p in space.producers]
                keep[sid] = magnitude_kept(producers, space.size, count)
            else:
                keep[sid] = self.eliminations[sid].kept(space.size, count)
        return keep

    def refitted(self, keep: dict[int, np.ndarray]) -> dict[str, np.ndarray]:
        """Local least-squares refits of every consumer whose input lost channels."""
        refits = {}
        for name in sorted({n for sid in keep for n, _ in self.spaces[sid].consumers}):
            node = self.nodes[name]
            info = self.graph.conv(node)
            taps = info.kernel[0] * info.kernel[1]
            kept = kept_channels(self.channels, node.input[0], keep)
            hessian = self.hessians[name]
            columns = np.concatenate([(kept[:, None] * taps + np.arange(taps)).reshape(-1), [hessian.shape[0] - 1]])
            bias = self.graph.weights[info.bias] if info.bias else None
            refits[name] = refit(augmented_weights(self.graph.weights[info.weight], bias), hessian, columns)
        return refits

    def build(self, plan: dict[int, int], method: str) -> tuple[Graph, dict[int, np.ndarray]]:
        """The pruned graph for a plan: `reconstruct` (elimination, local refits) or `magnitude` (no refit)."""
        keep = self.keep(plan, method)
        return apply_plan(self.graph, self.channels, keep, self.refitted(keep) if method == "reconstruct" else None), keep

    def block_ends(self) -> set[str]:
        """FSKD's points: the convolutions that end a block, whose outputs the next blocks or the heads read as they
        are: producers of a residual sum (a space of several producers) and of channels never pruned (the heads)."""
        ends = set()
        for space in self.channels.spaces.values():
            if len(space.producers) > 1 or not space.prunable:
                ends.update(space.producers)
        return ends

    def points(self, pruned: Graph, keep: dict[int, np.ndarray], correct: bool) -> list[Point]:
        """The sequential pass's points in graph order: every refitted consumer, and with `correct` every block end
        (block_ends) not refitted, for the FSKD correction."""
        refitted = {n for sid in keep for n, _ in self.spaces[sid].consumers}
        block_ends = self.block_ends()
        found = []
        for node in pruned.nodes:
            if node.op_type != "Conv" or pruned.is_depthwise(node) or pruned.conv(node).group != 1:
                continue
            rows = kept_channels(self.channels, node.output[0], keep)
            if node.name in refitted and not correct:
                found.append(Point(node.name, "refit", rows))
            elif node.name not in refitted and correct and node.name in block_ends:
                found.append(Point(node.name, "correct", rows))
        return found
