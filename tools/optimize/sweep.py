"""The sequential pass against the original (teacher) model, convolution by convolution in the graph's order.

At each point the pruned (student) model so far and the teacher run the calibration frames up to that point:
- a *refit* point (a convolution reading pruned channels) gets new weights by least squares from the student's own
  inputs to the teacher's outputs (He et al. 2017, sec. 3.3: inputs from the pruned model, targets from the original),
  which both reconstructs the pruned channels and absorbs the error of every pruned layer before it;
- a *correction* point (FSKD, Li et al. 2020) gets a 1x1 convolution Q (and a shift) fitted by least squares from the
  student's output to the teacher's, folded into the convolution itself: W <- Q W, b <- Q b + q. The graph keeps its
  shape; folding equals running the 1x1 correction after the convolution (`fold_correction`).
Both solves are ridge-damped (each input by a small share of its own energy) against the few samples of small maps.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tools.optimize.graph import Graph
from tools.optimize.statistics import augmented, im2col, positions, session, with_outputs

# Ridge damping, as a share of each input's energy, per input per sample (so D inputs fitted on N pixels are damped by
# RIDGE * D / N): negligible on large maps, what keeps a wide 1x1 correction on a 10x10 map from fitting noise.
RIDGE = 0.01


@dataclass(frozen=True)
class Point:
    node: str
    kind: str  # "refit" or "correct"
    rows: np.ndarray  # the teacher's output channels this convolution still produces (all, unless it was pruned)


def fold_correction(weight: np.ndarray, bias: np.ndarray | None, correction: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Conv (weight [O, I, kh, kw], bias [O]) followed by the 1x1 conv [Q | q] ([O, O+1]) as one convolution."""
    q, shift = correction[:, :-1], correction[:, -1]
    folded = np.tensordot(q, weight.astype(np.float64), axes=(1, 0))
    base = np.zeros(weight.shape[0]) if bias is None else bias.astype(np.float64)
    return folded.astype(np.float32), (q @ base + shift).astype(np.float32)


def solve(gram: np.ndarray, cross: np.ndarray, ridge: float, prior: np.ndarray | None = None) -> np.ndarray:
    """argmin_A ||T - A S||^2 + ridge * sum_i S_ii (A - A0)_:i^2 from S S^T (gram) and T S^T (cross): each input damped
    by its own energy (scale-free) towards the prior A0 (the weights as they are; zero where none is given), the
    constant last column (the bias) not at all."""
    damping = ridge * np.diag(gram).copy()
    damping[-1] = 0.0
    damping += 1e-12 * max(float(np.mean(np.diag(gram))), 1e-30)
    right = cross if prior is None else cross + prior * damping[None, :]
    return np.linalg.solve(gram + np.diag(damping), right.T).T


def sweep(lanes: Sequence[tuple[Graph, Sequence[Point]]], teacher: Graph, frames: Sequence[np.ndarray], threads: int | None = None,
          max_positions: int = 1024, ridge: float = RIDGE, tick=None) -> list[dict[str, float]]:  # fmt: skip
    """Each lane's student (changed in place) with its points refitted or corrected in graph order; the teacher runs
    once over the frames for every point of every lane. Returns, per lane and point, the relative output error the fit
    leaves on the calibration frames (||T - A S||^2 / ||T||^2). `tick()`, where given, is called after each layer."""
    order = {node.name: index for index, node in enumerate(teacher.nodes)}
    wanted = sorted({p.node for _, points in lanes for p in points}, key=order.__getitem__)
    errors: list[dict[str, float]] = [{} for _ in lanes]
    targets = _targets(teacher, wanted, frames, threads, max_positions)
    students = [Forward(student, [p.node for p in points], frames, threads) for student, points in lanes]
    for name in wanted:
        for lane, ((_, points), student) in enumerate(zip(lanes, students, strict=True)):
            point = next((p for p in points if p.node == name), None)
            if point is not None:
                errors[lane][name] = _fit(student, point, targets[name], ridge)
        if tick is not None:
            tick()
    return errors


def _targets(teacher: Graph, wanted: list[str], frames: Sequence[np.ndarray], threads: int | None, max_positions: int) -> dict[str, list]:
    """Per point, per frame: the teacher's output at a fixed subset of its pixels (all, on small maps), from one
    session that gives every point's output at once."""
    nodes = {node.name: node for node in teacher.nodes}
    outputs = [nodes[name].output[0] for name in wanted]
    run = session(with_outputs(teacher, outputs), threads)
    (input_name,) = teacher.inputs
    targets: dict[str, list] = {name: [] for name in wanted}
    for index, frame in enumerate(frames):
        values = run.run(outputs, {input_name: frame})
        for number, (name, value) in enumerate(zip(wanted, values, strict=True)):
            value = value[0].reshape(value.shape[1], -1)
            chosen = positions(value.shape[1], max_positions, index * 7919 + number)
            targets[name].append((chosen, value if chosen is None else np.ascontiguousarray(value[:, chosen])))
    return targets


class Forward:
    """A student run forward over the calibration frames as its points are fitted in graph order: the tensors of
    layers that will not change again are kept (per frame) while a layer some later point reads through still needs
    them, so each point runs only the layers between the tensors kept and the one it observes, not the model from its
    input (the work grows with the model's depth, not with its square)."""

    def __init__(self, graph: Graph, points: Sequence[str], frames: Sequence[np.ndarray], threads: int | None) -> None:
        self.graph, self.threads = graph, threads
        self.pending = set(points)  # layers whose weights a fit will still change: never kept
        self.index = {id(node): number for number, node in enumerate(graph.nodes)}
        (input_name,) = graph.inputs
        self.kept: dict[str, list[np.ndarray]] = {input_name: list(frames)}
        self.count = len(frames)
        self.done: set[int] = set()  # layers whose outputs are kept, or no longer needed
        self.needed = self._ancestors([node for node in graph.nodes if node.name in self.pending])

    def _ancestors(self, nodes: list) -> set[int]:
        found, stack = set(), list(nodes)
        while stack:
            node = stack.pop()
            if self.index[id(node)] in found:
                continue
            found.add(self.index[id(node)])
            stack.extend(self.graph.producer[t] for t in node.input if t in self.graph.producer)
        return found

    def values(self, tensor: str) -> list[np.ndarray]:
        """The tensor's value for each frame, with the student's weights as they are now."""
        if tensor in self.kept:
            return list(self.kept[tensor])
        graph = self.graph
        run, feeds, stack, seen = set(), [], [tensor], set()
        while stack:
            name = stack.pop()
            if not name or name in seen:
                continue
            seen.add(name)
            if name in self.kept:
                feeds.append(name)
            elif name in graph.producer:
                node = graph.producer[name]
                run.add(self.index[id(node)])
                stack.extend(node.input)
        final = {i for i in run if graph.nodes[i].name not in self.pending and graph.nodes[i].op_type != "Constant"}
        now_done = self.done | final
        keep = [t for i in sorted(final) for t in graph.nodes[i].output if t and t not in graph.weights and self._wanted(t, now_done)]
        outputs = list(dict.fromkeys([tensor, *keep]))
        model = _subgraph(graph, sorted(run), {name: self.kept[name][0] for name in feeds}, outputs)
        ours = session(model, self.threads)
        results = [ours.run(outputs, {name: self.kept[name][k] for name in feeds}) for k in range(self.count)]
        self.done = now_done
        for position, name in enumerate(outputs):
            if name in keep:
                self.kept[name] = [values[position] for values in results]
        for name in [t for t in self.kept if not self._wanted(t, self.done)]:
            del self.kept[name]
        return [values[0] for values in results]

    def _wanted(self, tensor: str, done: set[int]) -> bool:
        """Whether a layer that some point still reads through, not yet run for good, reads the tensor."""
        return any((i := self.index[id(node)]) in self.needed and i not in done for node in self.graph.consumers.get(tensor, []))


def _subgraph(graph: Graph, nodes: list[int], feeds: dict[str, np.ndarray], outputs: list[str]):
    """The model of these layers (by position), reading `feeds` (tensors kept from earlier runs) as its inputs."""
    import onnx
    from onnx import helper

    model = graph.to_model(infer=False)
    kept = [model.graph.node[i] for i in nodes]
    del model.graph.node[:]
    model.graph.node.extend(kept)
    used = {t for node in kept for t in node.input}
    initializers = [i for i in model.graph.initializer if i.name in used and i.name not in feeds]
    del model.graph.initializer[:]
    model.graph.initializer.extend(initializers)
    del model.graph.input[:]
    model.graph.input.extend(
        helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(value.dtype), value.shape) for name, value in feeds.items()
    )
    del model.graph.output[:]
    model.graph.output.extend([onnx.ValueInfoProto(name=t) for t in outputs])
    return model


def _fit(student: Forward, point: Point, targets: list, ridge: float) -> float:
    graph = student.graph
    node = next(n for n in graph.nodes if n.name == point.node)
    info = graph.conv(node)
    observed = node.input[0] if point.kind == "refit" else node.output[0]
    gram = cross = None
    energy, samples = 0.0, 0
    for value, (chosen, target) in zip(student.values(observed), targets, strict=True):
        source = im2col(value[0], info) if point.kind == "refit" else value[0].reshape(value.shape[1], -1)
        source = augmented(source if chosen is None else source[:, chosen])
        target = target[point.rows]
        gram = (source @ source.T).astype(np.float64) + (0 if gram is None else gram)
        cross = (target @ source.T).astype(np.float64) + (0 if cross is None else cross)
        energy += float(np.sum(target.astype(np.float64) ** 2))
        samples += source.shape[1]
    scale = len(gram) / max(samples, 1)
    if point.kind == "correct":  # no correction: the identity
        prior = np.hstack([np.eye(len(point.rows)), np.zeros((len(point.rows), 1))])
    else:  # the weights as they are (the local refit)
        weight = graph.weights[info.weight]
        prior = np.hstack([weight.reshape(weight.shape[0], -1), (graph.weights[info.bias] if info.bias else np.zeros(weight.shape[0]))[:, None]])
    fitted = solve(gram, cross, (ridge if point.kind == "correct" else ridge / 10) * scale, prior.astype(np.float64))
    residual = energy - 2 * float(np.sum(fitted * cross)) + float(np.sum((fitted @ gram) * fitted))
    _write(graph, node, info, point.kind, fitted)
    student.pending.discard(point.node)
    return max(residual, 0.0) / max(energy, 1e-30)


def _write(graph: Graph, node, info, kind: str, fitted: np.ndarray) -> None:
    weight = graph.weights[info.weight]
    bias = graph.weights[info.bias] if info.bias else None
    if kind == "refit":
        new_weight = fitted[:, :-1].reshape(weight.shape).astype(np.float32)
        new_bias = fitted[:, -1].astype(np.float32)
    else:
        new_weight, new_bias = fold_correction(weight, bias, fitted)
    graph.set_weight(info.weight, new_weight)
    if info.bias is None:
        from tools.optimize.prune import add_bias

        add_bias(graph, node, new_bias)
    else:
        graph.set_weight(info.bias, new_bias)
