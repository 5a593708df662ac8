"""The greedy allocation stops once the largest wanted saving is reached, and every plan is the one the full run of
steps gives (the steps after it only lengthen the list that no plan reads)."""

from __future__ import annotations

from tools.optimize.allocate import allocate, plan_at


def _problem():
    """Three spaces of 16 counts each; a space's time is linear in its count, its error quadratic in what it drops,
    with different weights, so the greedy order interleaves them."""
    spaces = {space: list(range(60, 0, -4)) for space in (1, 2, 3)}
    weights = {1: 1.0, 2: 0.5, 3: 2.0}
    calls = []

    def predict(counts: dict[int, int]) -> float:
        calls.append(dict(counts))
        return sum(weights[s] * counts.get(s, 64) for s in spaces)

    errors = {s: (lambda count, s=s: (64 - count) ** 2 / weights[s]) for s in spaces}
    return spaces, errors, predict, calls


def test_stopping_at_the_largest_saving_gives_every_plan_the_full_run_gives_with_fewer_predictions():
    spaces, errors, predict, full_calls = _problem()
    base, steps = allocate(spaces, errors, predict)
    savings = (0.1, 0.2, 0.3)
    spaces, errors, predict, early_calls = _problem()
    early_base, early = allocate(spaces, errors, predict, saving=max(savings))
    assert early_base == base and early == steps[: len(early)]
    assert early[-1].ms <= base * 0.7 < early[-2].ms  # it stopped at the first step that reached the largest saving
    assert len(early) < len(steps) and len(early_calls) < len(full_calls)
    for saving in savings:
        assert plan_at(early, base, saving) == plan_at(steps, base, saving) is not None


def test_a_saving_beyond_reach_runs_every_step_as_before():
    spaces, errors, predict, _ = _problem()
    base, steps = allocate(spaces, errors, predict)
    spaces, errors, predict, _ = _problem()
    assert allocate(spaces, errors, predict, saving=0.99) == (base, steps)
    assert plan_at(steps, base, 0.99) is None


def test_the_resizer_gives_each_counts_the_layers_a_fresh_resize_gives_and_the_memo_the_same_prediction(tmp_path):
    """`sdk optimize` resizes and predicts hundreds of models of one graph: the Resizer remakes only the layers whose
    own spaces changed (the same object for the same counts) and the prediction's memo keeps the fusion groups. Every
    model and prediction equals what a fresh resize of every layer and a prediction without memo give."""
    import random
    from dataclasses import replace

    from tests.tools.optimize.graphs import Builder
    from tools.optimize.allocate import Resizer, _resized_layer, counts_for
    from tools.optimize.channels import Channels
    from tools.optimize.graph import Graph
    from tools.perf.layers import load_layers
    from tools.perf.platforms import machine
    from tools.perf.predict import predict_device

    b = Builder(channels=3, size=16)
    stem = b.relu(b.conv("x", 3, 32, kernel=3))
    left = b.relu(b.conv(b.conv(stem, 32, 32, kernel=3, group=32), 32, 48))
    joined = b.op("Concat", [left, b.relu(b.conv(stem, 32, 16))], axis=1)
    added = b.op("Add", [b.conv(joined, 64, 40), b.conv(stem, 32, 40)])
    path = b.save([b.conv(b.relu(added), 40, 8)], tmp_path / "m.onnx")
    layers, channels = load_layers(path), Channels(Graph.load(path))
    spaces = {s.id: counts_for(s.size, 8) for s in channels.prunable()}
    spaces = {sid: counts for sid, counts in spaces.items() if counts}
    assert len(spaces) >= 3

    def fresh(counts: dict[int, int]):
        def shape(tensor, old):
            segments = channels.segments(tensor)
            return (old[0], sum(counts.get(s.space, s.size) for s in segments), *old[2:]) if len(old) == 4 and segments else old

        made = []
        for layer in layers.layers:
            ins = tuple(shape(t, s) for t, s in zip(layer.inputs, layer.input_shapes, strict=False))
            outs = tuple(shape(t, s) for t, s in zip(layer.outputs, layer.output_shapes, strict=False))
            made.append(layer if (ins, outs) == (layer.input_shapes, layer.output_shapes) else _resized_layer(layer, ins, outs))
        return replace(layers, layers=tuple(made))

    resize, target, memo, rng = Resizer(layers, channels), machine("jetson-orin-nano-8gb"), {}, random.Random(0)
    seen = []
    for _ in range(40):
        counts = {sid: rng.choice(options) for sid, options in spaces.items() if rng.random() < 0.5}
        model = resize(counts)
        assert model == fresh(counts) and model != layers or not counts
        assert predict_device(model, target, "fp16", memo=memo) == predict_device(fresh(counts), target, "fp16")
        seen.append((counts, model))
    counts, model = seen[-1]
    again = resize(dict(counts))
    assert all(x is y for x, y in zip(again.layers, model.layers, strict=True))  # the same counts: the same layer objects
    untouched = [i for i, spaces_of in enumerate(resize.spaces) if not set(spaces_of) & set(counts)]
    assert untouched and all(again.layers[i] is layers.layers[i] for i in untouched)
