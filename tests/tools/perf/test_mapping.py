"""ONNX Runtime's executed nodes mapped back onto the prepared layers of real models: every measured node lands on one
measured layer, every prepared layer in one, and fusions are named with what they fused."""

from __future__ import annotations

from collections import Counter

import pytest

from sdk.profiling import OPTIMIZED_FILE
from tools.perf.analysis import layer_rows
from tools.perf.layers import load_layers
from tools.perf.mapping import map_executed, read_optimized


@pytest.fixture(scope="module")
def mapped(real_profiles):
    found = {}
    for name, (path, raw, folder) in real_profiles.items():
        model = load_layers(path)
        found[name] = (model, raw, map_executed(model, read_optimized(folder / OPTIMIZED_FILE)))
    return found


def test_the_real_models_are_there(real_profiles):
    assert {"ssdlite", "yolox"} <= set(real_profiles)  # the shared assets; the PaddleOCR models come with rapidocr-onnxruntime


def test_every_measured_node_lands_on_exactly_one_layer(mapped):
    for name, (model, raw, groups) in mapped.items():
        executed = Counter(node for group in groups for node in group.executed)
        measured = {node["name"] for node in raw["nodes"]}
        assert measured <= set(executed), f"{name}: measured nodes on no layer: {sorted(measured - set(executed))[:5]}"
        assert max(executed.values()) == 1, name
        members = Counter(member for group in groups for member in group.members)
        assert set(members) == {layer.name for layer in model.layers} and max(members.values()) == 1, name


def test_fusions_are_named_with_what_they_fused(mapped):
    model, _, groups = mapped["yolox"]
    swish = next(g for g in groups if g.executed_ops == ("QuickGelu",))
    assert len(swish.members) == 2 and {model.by_name()[m].op for m in swish.members} == {"Sigmoid", "Mul"}
    assert swish.name == " + ".join(swish.members)
    ssd_model, _, ssd_groups = mapped["ssdlite"]
    fused = [g for g in ssd_groups if len(g.members) > 1 and ssd_model.by_name()[g.anchor].op == "Conv"]
    others = {ssd_model.by_name()[m].op for g in fused for m in g.members if m != g.anchor}
    assert "Clip" in others and others <= {"Clip", "Relu", "Add", "BatchNormalization"}  # Conv + Relu6, Conv + the residual sum


def test_rows_hold_the_measurement_and_the_static_analysis(mapped):
    model, raw, groups = mapped["ssdlite"]
    times = {n["name"]: n["times_ms"] for n in raw["nodes"]}
    rows = layer_rows(model, groups, times, None)
    assert len(rows) == len(groups)
    assert sum(r["share"] for r in rows) == pytest.approx(1.0, abs=len(rows) * 5e-5 + 1e-9)  # each share rounded to 4 places
    conv = next(r for r in rows if r["op"] == "Conv" and r["flops"] > 0)
    assert conv["bytes"]["total"] == conv["bytes"]["weights"] + conv["bytes"]["activations_in"] + conv["bytes"]["activations_out"]
    assert conv["intensity"] == pytest.approx(conv["flops"] / conv["bytes"]["total"], rel=1e-3)
    assert conv["measured_p90_ms"] >= conv["measured_ms"] > 0 and conv["predicted_ms"] is None


def test_a_node_outside_the_optimised_graph_joins_the_layer_before_it():
    from tools.perf.mapping import MeasuredLayer, attach_unmapped

    groups = (MeasuredLayer("a", ("a",), ("a",), ("Conv",)), MeasuredLayer("b", ("b",), ("b",), ("Relu",)))
    joined = attach_unmapped(groups, ["loop_body_x", "a", "inner", "b", "tail"])
    assert joined[0].executed == ("a", "loop_body_x", "inner") and joined[1].executed == ("b", "tail")


def test_duplicate_node_names_become_distinct_layers():
    import onnx
    from onnx import TensorProto, helper

    from tools.perf.layers import layers_of

    nodes = [helper.make_node("Relu", ["x"], ["y"], name="act"), helper.make_node("Relu", ["y"], ["z"], name="act")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 4))],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, (1, 4))])  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    assert [layer.name for layer in layers_of(onnx.shape_inference.infer_shapes(model)).layers] == ["act", "act#1"]
