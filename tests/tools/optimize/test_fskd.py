"""Few-sample distillation: the folded 1x1 correction, and the sequential pass against the teacher."""

from __future__ import annotations

import numpy as np

from tests.tools.optimize.graphs import Builder, frames, run
from tools.optimize.channels import Channels
from tools.optimize.graph import Graph
from tools.optimize.prune import apply_plan
from tools.optimize.sweep import Point, fold_correction, sweep


def test_the_folded_correction_equals_running_the_1x1_correction_after_the_convolution():
    b = Builder(seed=11)
    y = b.conv("x", 3, 6, kernel=3, name="A")
    correction = b.rng.normal(0, 0.5, (6, 7))  # [Q | q]
    z = b.conv(y, 6, 6, weight=correction[:, :6, None, None], bias=correction[:, 6], name="Q")
    two_layers = b.model([z])
    graph = Graph(two_layers)
    weight, bias = fold_correction(graph.weights["A.w"], graph.weights["A.b"], correction)
    one = Builder(seed=0)
    folded = one.model([one.conv("x", 3, 6, kernel=3, weight=weight, bias=bias, name="A")])
    test = frames(2, seed=4)
    for (expected,), (got,) in zip(run(two_layers, test), run(folded, test), strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


def test_the_correction_pulls_a_damaged_student_back_to_its_teacher():
    b = Builder(seed=12)
    a = b.relu(b.conv("x", 3, 8, kernel=3, name="A"))
    y = b.conv(a, 8, 6, name="B")
    teacher = Graph(b.model([y]))
    student = Graph(teacher.to_model())
    mixing = np.eye(6) * 0.8 + b.rng.normal(0, 0.1, (6, 6))  # a student whose last layer drifted (a well-conditioned mix)
    student.set_weight("B.w", np.tensordot(mixing, student.weights["B.w"], axes=(1, 0)))
    student.set_weight("B.b", mixing @ student.weights["B.b"] + 0.3)
    calibration, held_out = frames(8, seed=2), frames(3, seed=5)

    def error(graph: Graph) -> float:
        pairs = zip(run(teacher.to_model(), held_out), run(graph.to_model(), held_out), strict=True)
        return float(np.mean([np.sum((s - t) ** 2) / np.sum(t**2) for (t,), (s,) in pairs]))

    before = error(student)
    rows = np.arange(6)
    (errors,) = sweep([(student, [Point("B", "correct", rows)])], teacher, calibration)
    assert error(student) < 0.01 * before  # a 1x1 correction can undo a mix of the outputs (up to its ridge damping)
    assert errors["B"] < 1e-2


def test_the_sequential_refit_absorbs_the_pruned_inputs_error():
    b = Builder(seed=13)
    a = b.relu(b.conv("x", 3, 8, kernel=3, name="A"))
    c = b.relu(b.conv(a, 8, 8, name="C"))
    y = b.conv(c, 8, 4, name="D")
    teacher = Graph(b.model([y]))
    channels = Channels(teacher)
    space = next(s for s in channels.prunable() if s.producers == ["A"])
    keep = {space.id: np.arange(5)}
    student = apply_plan(teacher, channels, keep)  # A loses three channels, C merely sliced
    held_out = frames(3, seed=6)

    def error(graph: Graph) -> float:
        pairs = zip(run(teacher.to_model(), held_out), run(graph.to_model(), held_out), strict=True)
        return float(np.mean([np.sum((s - t) ** 2) / np.sum(t**2) for (t,), (s,) in pairs]))

    before = error(student)
    sweep([(student, [Point("C", "refit", np.arange(8))])], teacher, frames(10, seed=3))
    assert error(student) < 0.5 * before
