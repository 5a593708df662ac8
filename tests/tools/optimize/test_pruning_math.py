"""Channel pruning on small graphs built by hand: exact recovery, coupled channels, blocked heads, runnable results."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from tests.tools.optimize.graphs import Builder, frames, run
from tools.optimize.channels import Channels
from tools.optimize.graph import Graph
from tools.optimize.prune import apply_plan
from tools.optimize.pruning import Pruner
from tools.optimize.reconstruct import eliminate
from tools.optimize.statistics import input_hessians


def _dependent_model():
    """x -> conv A (3 -> 8, 3x3, linear) -> conv B (8 -> 5, 3x3) -> y, where A's channels 6 and 7 are linear
    combinations of channels 0..5 (weights and biases alike), so the activations are too."""
    b = Builder(seed=3)
    w = b.rng.normal(0, 1, (8, 3, 3, 3))
    bias = b.rng.normal(0, 0.5, 8)
    w[6], bias[6] = 0.7 * w[0] - 1.3 * w[2], 0.7 * bias[0] - 1.3 * bias[2]
    w[7], bias[7] = w[1] + 0.5 * w[4] + 2 * w[5], bias[1] + 0.5 * bias[4] + 2 * bias[5]
    a = b.conv("x", 3, 8, kernel=3, weight=w, bias=bias, name="A")
    y = b.conv(a, 8, 5, kernel=3, name="B")
    return b.model([y]), y


def _pruner(model, calibration):
    graph = Graph(model)
    pruner = Pruner(graph, Channels(graph))
    pruner.hessians = input_hessians(graph, pruner.probes(), calibration)
    return pruner


def test_least_squares_recovers_a_layer_exactly_when_the_removed_channels_depend_on_the_kept():
    model, y = _dependent_model()
    pruner = _pruner(model, frames(6))
    (space,) = pruner.spaces.values()
    assert space.producers == ["A"] and space.consumers == [("B", 0)]
    keep = {space.id: np.arange(6)}  # channels 6 and 7 go
    pruned = apply_plan(pruner.graph, pruner.channels, keep, pruner.refitted(keep))
    assert pruned.weights["A.w"].shape == (6, 3, 3, 3) and pruned.weights["B.w"].shape == (5, 6, 3, 3)
    held_out = frames(3, seed=9)
    for (before,), (after,) in zip(run(model, held_out), run(pruned.to_model(), held_out), strict=True):
        np.testing.assert_allclose(after, before, rtol=1e-3, atol=1e-3 * np.abs(before).max())
    # Without the refit (the same channels, B merely sliced) the output is far off: the refit is what recovers it.
    sliced = apply_plan(pruner.graph, pruner.channels, keep)
    (before,), (after,) = run(model, held_out[:1])[0], run(sliced.to_model(), held_out[:1])[0]
    assert np.abs(after - before).max() > 0.1 * np.abs(before).max()


def test_elimination_removes_dependent_channels_at_no_cost():
    model, _ = _dependent_model()
    pruner = _pruner(model, frames(6))
    (space,) = pruner.spaces.values()
    elimination = eliminate(8, pruner.consumers(space), [7, 6, 4])
    assert elimination.error_at(8, 6) < 1e-6  # two of the eight carry nothing the other six do not
    assert elimination.error_at(8, 4) > 1e-3  # the next two do
    kept = elimination.kept(8, 6)
    assert len(kept) == 6 and list(kept) == sorted(kept)


def test_an_elimination_asked_step_by_step_and_let_go_of_between_goes_where_one_asked_at_once_goes():
    """The elimination runs only as far as it is asked; asked count by count, its inverses released part-way (they are
    recomputed exactly from the channels left), it removes the same channels at about the same cost as in one go."""
    b = Builder(seed=21)
    y = b.conv(b.relu(b.conv("x", 3, 16, kernel=3, name="A")), 16, 6, kernel=3, name="B")
    pruner = _pruner(b.model([y]), frames(6))
    (space,) = pruner.spaces.values()
    counts = [14, 12, 10, 8, 6, 4]
    at_once = eliminate(16, pruner.consumers(space), counts)
    assert at_once.error_at(16, 4) > 0 and len(at_once.order) == 12
    stepwise = eliminate(16, pruner.consumers(space), counts)
    assert stepwise.error_at(16, 14) == at_once.errors[14] and len(stepwise.order) == 2  # no further than asked
    stepwise.release()
    for count in counts[1:]:
        np.testing.assert_allclose(stepwise.error_at(16, count), at_once.errors[count], rtol=1e-4)  # damped alike, up to rounding
        stepwise.release()
    assert stepwise.order == at_once.order and list(stepwise.kept(16, 8)) == list(at_once.kept(16, 8))


def test_a_residual_add_ties_its_producers_and_both_are_pruned_together(tmp_path):
    b = Builder(seed=4)
    a = b.conv("x", 3, 8, name="A")
    r = b.relu(a)
    c = b.conv(r, 8, 8, name="C")
    s = b.op("Add", [a, c])
    y = b.conv(b.relu(s), 8, 4, name="D")
    model = b.model([y])
    graph = Graph(model)
    channels = Channels(graph)
    (space,) = [sp for sp in channels.prunable() if "A" in sp.producers]
    assert sorted(space.producers) == ["A", "C"]  # one space: A's and C's channels meet in the add
    assert sorted(n for n, _ in space.consumers) == ["C", "D"]
    pruned = apply_plan(graph, channels, {space.id: np.array([0, 2, 3, 5, 6, 7])})
    assert pruned.weights["A.w"].shape[0] == pruned.weights["C.w"].shape[0] == 6
    assert pruned.weights["C.w"].shape[1] == pruned.weights["D.w"].shape[1] == 6
    _runs_and_checks(pruned, model)


def test_a_concat_prunes_each_input_at_its_offset_and_a_depthwise_group_with_its_producer():
    b = Builder(seed=5)
    p = b.relu(b.conv("x", 3, 8, name="P"))
    q = b.relu(b.conv("x", 3, 4, name="Q"))
    d = b.relu(b.conv(q, 4, 4, kernel=3, group=4, name="DW"))
    cat = b.op("Concat", [p, d], axis=1)
    y = b.conv(cat, 12, 4, name="R")
    model = b.model([y])
    graph = Graph(model)
    channels = Channels(graph)
    spaces = {sp.producers[0]: sp for sp in channels.prunable()}
    assert spaces["P"].consumers == [("R", 0)] and spaces["Q"].consumers == [("R", 8)]
    assert ("DW", 0) in spaces["Q"].passthrough  # the depthwise convolution goes with Q's channels
    keep = {spaces["P"].id: np.array([1, 2, 4, 5, 6, 7]), spaces["Q"].id: np.array([0, 3])}
    pruned = apply_plan(graph, channels, keep)
    assert pruned.weights["DW.w"].shape == (2, 1, 3, 3) and pruned.groups["DW"] == 2
    np.testing.assert_array_equal(pruned.weights["R.w"][:, :6], graph.weights["R.w"][:, [1, 2, 4, 5, 6, 7]])
    np.testing.assert_array_equal(pruned.weights["R.w"][:, 6:], graph.weights["R.w"][:, [8, 11]])
    _runs_and_checks(pruned, model)


def test_a_model_whose_every_convolution_feeds_a_head_has_nothing_to_prune_and_says_why():
    b = Builder(seed=6)
    boxes = b.op("Transpose", [b.conv("x", 3, 8, name="BOX")], perm=[0, 2, 3, 1])
    scores = b.conv("x", 3, 4, name="CLS")
    channels = Channels(Graph(b.model([boxes, scores])))
    assert channels.prunable() == []
    reasons = {sp.producers[0]: " ".join(sp.blocked) for sp in channels.blocked()}
    assert "Transpose" in reasons["BOX"] and "model output" in reasons["CLS"]


def _runs_and_checks(pruned: Graph, original) -> None:
    model = pruned.to_model()
    checked = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    onnx.checker.check_model(checked, full_check=True)
    (out,) = run(model, frames(1))[0]
    (ref,) = run(original, frames(1))[0]
    assert out.shape == ref.shape and np.isfinite(out).all()


@pytest.mark.parametrize("kernel,stride", [(1, 1), (3, 1), (3, 2)])
def test_im2col_matches_the_convolution(kernel, stride):
    from tools.optimize.statistics import im2col

    b = Builder(seed=7)
    y = b.conv("x", 3, 4, kernel=kernel, stride=stride, name="K")
    model = b.model([y])
    graph = Graph(model)
    (node,) = graph.nodes
    info = graph.conv(node)
    x = frames(1)[0]
    columns = im2col(x[0], info)
    expected = run(model, [x])[0][0][0]
    weight = graph.weights["K.w"].reshape(4, -1)
    np.testing.assert_allclose((weight @ columns + graph.weights["K.b"][:, None]).reshape(expected.shape), expected, rtol=1e-4, atol=1e-5)
