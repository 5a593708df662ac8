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
    once per point for every lane. Returns, per lane and point, the relative output error the fit leaves on the
    calibration frames (||T - A S||^2 / ||T||^2). `tick()`, where given, is called after each layer (progress)."""
    order = {node.name: index for index, node in enumerate(teacher.nodes)}
    wanted = sorted({p.node for _, points in lanes for p in points}, key=order.__getitem__)
    errors: list[dict[str, float]] = [{} for _ in lanes]
    (input_name,) = teacher.inputs
    for number, name in enumerate(wanted):
        output = next(n for n in teacher.nodes if n.name == name).output[0]
        theirs = session(with_outputs(teacher, [output]), threads)
        targets = []
        for index, frame in enumerate(frames):
            (target,) = theirs.run([output], {input_name: frame})
            target = target[0].reshape(target.shape[1], -1)
            chosen = positions(target.shape[1], max_positions, index * 7919 + number)
            targets.append((chosen, target if chosen is None else target[:, chosen]))
        for lane, (student, points) in enumerate(lanes):
            point = next((p for p in points if p.node == name), None)
            if point is not None:
                errors[lane][name] = _fit(student, point, frames, targets, threads, ridge)
        if tick is not None:
            tick()
    return errors


def _fit(student: Graph, point: Point, frames: Sequence[np.ndarray], targets: list, threads: int | None, ridge: float) -> float:
    node = next(n for n in student.nodes if n.name == point.node)
    info = student.conv(node)
    observed = node.input[0] if point.kind == "refit" else node.output[0]
    ours = session(with_outputs(student, [observed]), threads)
    (input_name,) = student.inputs
    gram = cross = None
    energy, samples = 0.0, 0
    for frame, (chosen, target) in zip(frames, targets, strict=True):
        (value,) = ours.run([observed], {input_name: frame})
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
        weight = student.weights[info.weight]
        prior = np.hstack([weight.reshape(weight.shape[0], -1), (student.weights[info.bias] if info.bias else np.zeros(weight.shape[0]))[:, None]])
    fitted = solve(gram, cross, (ridge if point.kind == "correct" else ridge / 10) * scale, prior.astype(np.float64))
    residual = energy - 2 * float(np.sum(fitted * cross)) + float(np.sum((fitted @ gram) * fitted))
    _write(student, node, info, point.kind, fitted)
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
