"""The TensorRT profiler path, written against TensorRT's documented API and checked here without a GPU: every name it
uses on a TensorRT object exists in the real Python bindings of each series (the wheels the conformity test reads);
the profiler's log is cut into frames; the inspector's layer names map back onto the prepared layers, a DLA subgraph
as the one foreign node holding the layers inside it."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

from sdk.backends import tensorrt_gpu
from sdk.profiling import tensorrt_profile
from sdk.profiling.tensorrt_profile import split_frames
from tools.perf.layers import load_layers
from tools.perf.trt_mapping import map_tensorrt, named_layers

CONFORMITY = Path(__file__).resolve().parents[1] / "engine" / "test_tensorrt_conformity.py"


def _conformity():
    spec = importlib.util.spec_from_file_location("trt_conformity", CONFORMITY)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("series", ["8.6", "10", "11"])
def test_the_profiler_path_uses_only_names_the_bindings_have(series):
    conformity = _conformity()
    tree = ast.parse(Path(tensorrt_gpu.__file__).read_text())
    methods = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name in ("log_layers", "layer_information", "_layer_profiler")]
    scopes = [*methods, ast.parse(Path(tensorrt_profile.__file__).read_text())]
    names, qualified = conformity.names_in(scopes, conformity.TRT_OBJECTS | {"inspector"})
    used = names | {p for chain in qualified for p in chain}
    assert {"create_engine_inspector", "execution_context", "get_engine_information", "LayerInformationFormat", "JSON", "report_layer_time"} <= used
    (wheel,) = conformity.fetch((conformity.FULL_BINDINGS[series][0],), *conformity.FULL_BINDINGS[series][1:])
    assert not conformity.missing_from(used, conformity.identifiers_in(wheel))


def test_the_log_is_cut_into_frames():
    log = [("conv1 + relu1", 0.5), ("{ForeignNode[conv2...relu3]}", 1.0), ("conv1 + relu1", 0.4), ("{ForeignNode[conv2...relu3]}", 1.2)]
    nodes = split_frames(log, [0, 2])
    assert [n["name"] for n in nodes] == ["conv1 + relu1", "{ForeignNode[conv2...relu3]}"]
    assert nodes[0]["times_ms"] == [0.5, 0.4] and nodes[1]["times_ms"] == [1.0, 1.2]


def test_tensorrt_layer_names_map_onto_the_prepared_layers(prepared_example):
    model = load_layers(prepared_example.model_path)
    convs = [layer.name for layer in model.layers if layer.op == "Conv"]
    clips = [layer.name for layer in model.layers if layer.op == "Clip"]
    assert named_layers(f"{convs[0]} + {clips[0]}", model)[0] == [convs[0], clips[0]]
    assert named_layers(f"PWN(PWN({clips[0]}), {clips[1]})", model) == ([clips[0], clips[1]], "layer")
    assert named_layers(f"Reformatting CopyNode for Input Tensor 0 to {convs[3]}", model) == ([convs[3]], "reformat")
    inside, kind = named_layers(f"{{ForeignNode[{convs[1]}...{convs[5]}]}}", model)
    assert kind == "foreign" and inside[0] == convs[1] and inside[-1] == convs[5] and len(inside) > 5


def test_a_dla_subgraph_is_one_measured_layer_holding_its_layers(prepared_example):
    from sdk.engine.platforms import TensorRTVersion, dla_availability
    from tools.dla.analysis import analyse
    from tools.dla.graph import load_graph

    model = load_layers(prepared_example.model_path)
    version = TensorRTVersion.parse("10.3")
    availability = dla_availability("jetson-agx-orin", version)
    placement = analyse(load_graph(prepared_example.model_path), "m", "jetson-agx-orin", version, availability, "int8")
    first = [placement.layers[i].name for i in placement.subgraphs[0]]
    gpu = [v.name for v in placement.layers if v.device == "GPU"]
    nodes = [
        {"name": f"Reformatting CopyNode for Input Tensor 0 to {{ForeignNode[{first[0]}...{first[-1]}]}}", "op": "Reformat"},
        {"name": f"{{ForeignNode[{first[0]}...{first[-1]}]}}", "op": "ForeignNode"},
        *({"name": name, "op": "Shuffle"} for name in gpu),
    ]
    groups = map_tensorrt(model, nodes, placement)
    dla = next(g for g in groups if "ForeignNode" in g.executed_ops)
    assert set(first) <= set(dla.members) and len(dla.executed) == 2  # the reformat is the subgraph's cost
    assert {m for g in groups for m in g.members} == {layer.name for layer in model.layers}
    assert sum(len(g.executed) for g in groups) == len(nodes)
