"""Apply a rule table to a graph: per node a predicted device and reason, DLA subgraphs, transitions.

What is predicted here is what TensorRT's builder decides on the device (`can_run_on_DLA` and its
partitioner); the device build re-checks the placement contract with TensorRT's own answers.
Subgraphs are grown greedily in topological order: a DLA node joins the subgraph of a DLA producer
unless that would make the subgraph depend on itself through a GPU layer (a loadable runs as one
unit, so such a cycle forces TensorRT to split it).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

from sdk.engine.placement import PlacementSummary
from sdk.engine.platforms import DlaAvailability, TensorRTVersion
from tools.dla.graph import Graph, Node
from tools.dla.rules import Check, RuleTable, rule_table

DLA, GPU = "DLA", "GPU"


@dataclass(frozen=True)
class LayerVerdict:
    index: int
    name: str
    op: str
    layer: str  # TensorRT layer type, or "" when TensorRT has none on DLA
    device: str
    reason: str
    fix: str = ""
    subgraph: int | None = None


@dataclass(frozen=True)
class DlaReport:
    model: str
    platform: str
    tensorrt: str
    series: str
    precision: str
    dla_cores: int
    availability: str
    rule_source: str
    layers: tuple[LayerVerdict, ...]
    subgraphs: tuple[tuple[int, ...], ...]
    transitions: int
    io_boundaries: int
    loadables_per_core: int
    recommendations: tuple[str, ...] = field(default=())
    constants: tuple[str, ...] = ()

    @property
    def dla_layers(self) -> int:
        return sum(v.device == DLA for v in self.layers)

    @property
    def gpu_layers(self) -> int:
        return sum(v.device == GPU for v in self.layers)

    @property
    def reformats(self) -> int:
        """Reformat layers TensorRT inserts at most: one per boundary tensor (DLA and GPU layouts differ)."""
        return self.transitions + self.io_boundaries

    def summary(self) -> PlacementSummary:
        return PlacementSummary(self.dla_layers, self.gpu_layers, len(self.subgraphs), self.transitions, self.dla_cores, self.loadables_per_core)

    def as_dict(self) -> dict:
        return {
            "model": self.model,
            "platform": self.platform,
            "tensorrt": self.tensorrt,
            "rule_table": self.series,
            "rule_source": self.rule_source,
            "precision": self.precision,
            "dla_cores": self.dla_cores,
            "availability": self.availability,
            "summary": {
                "layers": len(self.layers),
                "dla_layers": self.dla_layers,
                "gpu_layers": self.gpu_layers,
                "subgraphs": len(self.subgraphs),
                "transitions": self.transitions,
                "io_boundaries": self.io_boundaries,
                "reformats": self.reformats,
                "loadables_per_core": self.loadables_per_core,
            },
            "subgraphs": [[self.layers[i].name for i in group] for group in self.subgraphs],
            "layers": [
                {"index": v.index, "name": v.name, "op": v.op, "layer": v.layer, "device": v.device}
                | {"reason": v.reason, "fix": v.fix, "subgraph": v.subgraph}
                for v in self.layers
            ]
            + [{"name": name, "op": "Constant", "device": "none", "reason": "weights, folded into their layers"} for name in self.constants],
            "recommendations": list(self.recommendations),
        }


def _passes(check: Check, facts: dict) -> bool:
    value = facts.get(check.fact)
    if value is None:
        return False  # unknown: TensorRT would not place what cannot be shown to fit
    values = value if isinstance(value, tuple) else (value,)
    if check.kind == "range":
        lo, hi = check.value
        return all(isinstance(v, (int, float)) and not (isinstance(v, float) and math.isnan(v)) and lo <= v <= hi for v in values)
    if check.kind == "one_of":
        return all(v in check.value for v in values)
    if check.kind == "equals":
        return all(v == check.value for v in values)
    if check.kind == "below":
        other = facts.get(check.value)
        return other is not None and len(other) == len(values) and all(a < b for a, b in zip(values, other, strict=True))
    raise ValueError(f"unknown check kind {check.kind!r}")


def _describe(check: Check, facts: dict) -> str:
    return f"{check.why} ({check.fact} = {facts.get(check.fact)!r})"


def judge_node(node: Node, table: RuleTable, precision: str = "int8") -> tuple[str, str, str, str]:
    """(device, TensorRT layer, reason, fix) for one node under the table's rules, for a build of `precision`."""
    facts = {**node.facts, "precision": precision}
    rule = table.layers.get(node.op)
    if rule is None:
        fix = table.no_layer_fix.get(node.op, f"replace {node.op} by supported layers or move it after the DLA part")
        return GPU, "", f"{node.op} has no DLA layer in TensorRT {table.series}", fix
    applicable = [c for c in (*table.general, *rule.checks) if c.when is None or facts.get(c.when[0]) == c.when[1]]
    failed = [c for c in applicable if not _passes(c, facts)]
    if failed:
        return GPU, rule.layer, "; ".join(_describe(c, facts) for c in failed), next((c.fix for c in failed if c.fix), "")
    return DLA, rule.layer, f"{rule.layer}: within the DLA restrictions", ""


class _Placement:
    """DLA subgraphs grown in topological order, never forming a cycle through a GPU layer."""

    def __init__(self, graph: Graph, devices: list[str]) -> None:
        self.devices = devices
        producer = {t: n.index for n in graph.nodes for t in n.outputs}
        self.edges = sorted({(producer[t], n.index) for n in graph.nodes for t in n.inputs if t in producer})
        self.preds: dict[int, set[int]] = {n.index: set() for n in graph.nodes}
        for a, b in self.edges:
            self.preds[b].add(a)
        self.group: dict[int, int] = {}

    def _unit(self, index: int) -> tuple[str, int]:
        return ("D", self.group[index]) if index in self.group else ("G", index)

    def _acyclic(self) -> bool:
        succ: dict[tuple, set] = {}
        indegree: Counter = Counter()
        for a, b in self.edges:
            if a not in self.group and self.devices[a] == DLA or b not in self.group and self.devices[b] == DLA:
                continue  # not placed yet
            ua, ub = self._unit(a), self._unit(b)
            if ua != ub and ub not in succ.setdefault(ua, set()):
                succ[ua].add(ub)
                indegree[ub] += 1
        units = set(succ) | set(indegree)
        ready = [u for u in units if indegree[u] == 0]
        seen = 0
        while ready:
            unit = ready.pop()
            seen += 1
            for nxt in succ.get(unit, ()):
                indegree[nxt] -= 1
                if indegree[nxt] == 0:
                    ready.append(nxt)
        return seen == len(units)

    def place(self) -> None:
        next_group = 0
        for index in sorted(self.preds):
            if self.devices[index] != DLA:
                continue
            candidates = sorted({self.group[p] for p in self.preds[index] if p in self.group})
            chosen = None
            for candidate in candidates:
                self.group[index] = candidate
                if self._acyclic():
                    chosen = candidate
                    break
                del self.group[index]
            if chosen is None:
                self.group[index] = next_group
                next_group += 1
                continue
            for other in candidates:
                if other == chosen:
                    continue
                before = dict(self.group)
                self.group = {n: chosen if g == other else g for n, g in self.group.items()}
                if not self._acyclic():
                    self.group = before

    def subgraphs(self) -> tuple[tuple[int, ...], ...]:
        members: dict[int, list[int]] = {}
        for index, group in sorted(self.group.items()):
            members.setdefault(group, []).append(index)
        return tuple(tuple(m) for _, m in sorted(members.items(), key=lambda item: item[1][0]))


def analyse(graph: Graph, model: str, platform: str, tensorrt: TensorRTVersion, availability: DlaAvailability, precision: str = "int8") -> DlaReport:
    table = rule_table(tensorrt)
    verdicts = []
    for node in graph.nodes:
        kind = table.layers[node.op].layer if node.op in table.layers else ""  # the GPU runs the same TensorRT layer
        if not availability.available:
            device, layer, reason, fix = GPU, kind, availability.reason, ""
        elif precision not in ("int8", "fp16"):
            device, layer, reason, fix = GPU, kind, f"DLA runs FP16 or INT8 only; the build is {precision}", "build INT8 or FP16"
        else:
            device, layer, reason, fix = judge_node(node, table, precision)
        verdicts.append([node, device, layer, reason, fix])
    devices = [v[1] for v in verdicts]
    placement = _Placement(graph, devices)
    placement.place()
    subgraphs = placement.subgraphs()
    number = {index: k for k, members in enumerate(subgraphs) for index in members}
    layers = tuple(LayerVerdict(n.index, n.name, n.op, layer, device, reason, fix, number.get(n.index)) for n, device, layer, reason, fix in verdicts)
    transitions, io_boundaries = _boundaries(graph, layers)
    recommendations = _recommend(graph, layers, len(subgraphs), table.loadables_per_core)
    return DlaReport(
        model,
        platform,
        str(tensorrt),
        tensorrt.series,
        precision,
        availability.cores,
        availability.reason,
        table.source,
        layers,
        subgraphs,
        transitions,
        io_boundaries,
        table.loadables_per_core,
        recommendations,
        graph.constants,
    )


def _location(verdict: LayerVerdict) -> tuple:
    return (DLA, verdict.subgraph) if verdict.device == DLA else (GPU,)


def _boundaries(graph: Graph, layers: tuple[LayerVerdict, ...]) -> tuple[int, int]:
    """Tensors that cross between the GPU and a DLA subgraph (or between two subgraphs), once per
    consuming side; and the engine inputs/outputs that a DLA subgraph reads or writes directly."""
    producer = {t: layers[n.index] for n in graph.nodes for t in n.outputs}
    consumers: dict[str, list[LayerVerdict]] = {}
    for node in graph.nodes:
        for tensor in node.inputs:
            consumers.setdefault(tensor, []).append(layers[node.index])
    transitions = io = 0
    for tensor, users in consumers.items():
        if tensor not in producer:
            io += len({_location(u) for u in users if u.device == DLA})
            continue
        source = _location(producer[tensor])
        transitions += len({_location(u) for u in users} - {source})
    io += sum(1 for t in graph.outputs if t in producer and producer[t].device == DLA)
    return transitions, io


def _recommend(graph: Graph, layers: tuple[LayerVerdict, ...], subgraphs: int, per_core: int) -> tuple[str, ...]:
    producer = {t: n.index for n in graph.nodes for t in n.outputs}
    successors: dict[int, set[int]] = {n.index: set() for n in graph.nodes}
    for node in graph.nodes:
        for tensor in node.inputs:
            if tensor in producer:
                successors[producer[tensor]].add(node.index)
    notes = []
    for node in graph.nodes:
        verdict = layers[node.index]
        if verdict.device != GPU or not verdict.fix:
            continue
        before = {layers[producer[t]].subgraph for t in node.inputs if t in producer and layers[producer[t]].device == DLA}
        after = {layers[s].subgraph for s in successors[node.index] if layers[s].device == DLA}
        if before and after:
            notes.append(f"{node.op} {node.name} splits DLA subgraphs {sorted(before)} -> {sorted(after)}: {verdict.fix}")
    gpu_ops = Counter((v.op, v.fix) for v in layers if v.device == GPU and v.fix)
    for (op, fix), count in gpu_ops.most_common():
        notes.append(f"{count} x {op} on the GPU: {fix}")
    if subgraphs > per_core:
        notes.append(f"{subgraphs} DLA subgraphs exceed the {per_core} loadables a core can hold: remove the layers that split them")
    return tuple(notes)
