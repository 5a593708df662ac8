"""Read an ONNX model into the facts the DLA rules check: per node, its parameters and tensor shapes.

Shapes come from ONNX shape inference on the prepared (static) model; a dimension that inference
cannot resolve makes `static` false. Weights (initializers, Constant nodes) are not activations.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sdk.errors import ModelError

FLOAT_TYPES = {1, 10, 16}  # onnx.TensorProto FLOAT, FLOAT16, BFLOAT16


@dataclass(frozen=True)
class Tensor:
    name: str
    shape: tuple[int | None, ...] | None  # None: unknown rank
    float: bool


@dataclass(frozen=True)
class Node:
    index: int
    name: str
    op: str
    inputs: tuple[str, ...]  # activation tensors only (no weights)
    outputs: tuple[str, ...]
    facts: dict


@dataclass(frozen=True)
class Graph:
    nodes: tuple[Node, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    constants: tuple[str, ...] = ()  # Constant nodes: weights, not layers (reported, never placed)


def load_graph(path: Path) -> Graph:
    import onnx

    try:
        model = onnx.load(str(path))
        model = onnx.shape_inference.infer_shapes(model, data_prop=True)
    except Exception as exc:  # onnx raises several unrelated types
        raise ModelError(f"{path}: not a readable ONNX model: {exc}") from None
    return graph_from_model(model)


def graph_from_model(model) -> Graph:
    from onnx import numpy_helper

    graph = model.graph
    weights = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant":
            for attribute in node.attribute:
                if attribute.name == "value":
                    weights[node.output[0]] = numpy_helper.to_array(attribute.t)
    tensors = {}
    for info in (*graph.input, *graph.value_info, *graph.output):
        tensor_type = info.type.tensor_type
        shape = None
        if tensor_type.HasField("shape"):
            shape = tuple(d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in tensor_type.shape.dim)
        tensors[info.name] = Tensor(info.name, shape, tensor_type.elem_type in FLOAT_TYPES)
    nodes, constants = [], []
    for index, node in enumerate(graph.node):
        if node.op_type == "Constant":
            constants.append(node.name or f"Constant_{index}")
            continue
        inputs = tuple(name for name in node.input if name and name not in weights)
        outputs = tuple(name for name in node.output if name)
        facts = _common_facts([tensors.get(n, Tensor(n, None, True)) for n in (*inputs, *outputs)])
        facts.update(_op_facts(node, [tensors.get(n) for n in inputs], [tensors.get(n) for n in outputs], weights))
        nodes.append(Node(len(nodes), node.name or f"{node.op_type}_{len(nodes)}", node.op_type, inputs, outputs, facts))
    graph_inputs = tuple(i.name for i in graph.input if i.name not in weights)
    return Graph(tuple(nodes), graph_inputs, tuple(o.name for o in graph.output), tuple(constants))


def _common_facts(tensors: list[Tensor]) -> dict:
    shapes = [t.shape for t in tensors]
    static = all(s is not None and all(d is not None for d in s) for s in shapes)
    ranks = [len(s) for s in shapes if s is not None]
    facts = {"static": static, "float": all(t.float for t in tensors), "max_rank": max(ranks, default=0)}
    first = shapes[0] if shapes and shapes[0] is not None else None
    facts["rank"] = len(first) if first is not None else None
    if static and shapes:
        # DLA's batch is the product of every dimension before C, H, W.
        batches, chw = [], []
        for shape in shapes:
            batch = 1
            for d in shape[:-3]:
                batch *= d
            batches.append(batch)
            chw.extend(shape[-3:])
        facts["batch"] = max(batches)
        facts["max_chw"] = max(chw, default=1)
    return facts


def _ints(node, name: str, default):
    for attribute in node.attribute:
        if attribute.name == name:
            return tuple(attribute.ints) if attribute.ints else attribute.i
    return default


def _string(node, name: str, default: str) -> str:
    for attribute in node.attribute:
        if attribute.name == name:
            return attribute.s.decode()
    return default


def _spatial(shape: tuple | None) -> tuple:
    return tuple(shape[2:]) if shape else ()


def _op_facts(node, inputs: list[Tensor | None], outputs: list[Tensor | None], weights: dict) -> dict:
    op = node.op_type
    in_shape = inputs[0].shape if inputs and inputs[0] is not None else None
    out_shape = outputs[0].shape if outputs and outputs[0] is not None else None
    if op in ("Conv", "ConvTranspose"):
        weight = weights.get(node.input[1])
        kernel = _ints(node, "kernel_shape", tuple(weight.shape[2:]) if weight is not None else ())
        rank = len(kernel)
        pads = _ints(node, "pads", (0,) * (2 * rank))
        groups = _ints(node, "group", 1)
        out_channels = out_shape[1] if out_shape and len(out_shape) > 1 else (weight.shape[0] if weight is not None else None)
        return {
            "spatial_rank": rank,
            "kernel": kernel + kernel,  # aligned with pads (begin..., end...)
            "pads": pads,
            "stride": _ints(node, "strides", (1,) * rank),
            "dilation": _ints(node, "dilations", (1,) * rank),
            "groups": groups,
            "out_channels": out_channels,
        }
    if op in ("MaxPool", "AveragePool"):
        window = _ints(node, "kernel_shape", ())
        return {
            "spatial_rank": len(window),
            "window": window,
            "stride": _ints(node, "strides", (1,) * len(window)),
            "pads": _ints(node, "pads", (0,) * (2 * len(window))),
        }
    if op in ("GlobalAveragePool", "GlobalMaxPool"):
        window = _spatial(in_shape)
        return {"spatial_rank": len(window), "window": window, "stride": (1,), "pads": (0,)}
    if op == "Clip":
        return {"clip_min": _clip_bound(node, 1, "min", weights, float("-inf")), "clip_max": _clip_bound(node, 2, "max", weights, float("inf"))}
    if op == "LRN":
        return {"size": _ints(node, "size", 0)}
    if op in ("Add", "Sub", "Mul", "Max", "Min", "Div", "Pow"):
        return {"broadcast": _broadcast(node, inputs, weights, out_shape)}
    if op in ("Concat", "Softmax"):
        axis = _ints(node, "axis", 1 if op == "Concat" else -1)
        rank = len(out_shape) if out_shape else None
        return {"axis": axis % rank if rank and axis < 0 else axis, "inputs": len(inputs)}
    if op in ("Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze"):
        kept = bool(in_shape and out_shape and in_shape[0] == out_shape[0])
        if op == "Transpose":
            perm = _ints(node, "perm", ())
            kept = kept and (not perm or perm[0] == 0)
        return {"out_rank": len(out_shape) if out_shape is not None else None, "batch_kept": kept}
    if op == "Resize":
        return _resize_facts(node, weights, in_shape, out_shape)
    return {}


def _clip_bound(node, position: int, attribute: str, weights: dict, default: float) -> float:
    if len(node.input) > position and node.input[position]:
        value = weights.get(node.input[position])
        return float(value) if value is not None else float("nan")  # computed at run time: not a DLA clip
    for item in node.attribute:
        if item.name == attribute:
            return float(item.f)
    return default


def _broadcast(node, inputs: list[Tensor | None], weights: dict, out_shape) -> str:
    shapes = []
    for name in node.input:
        if name in weights:
            shapes.append(tuple(weights[name].shape))
        else:
            tensor = next((t for t in inputs if t is not None and t.name == name), None)
            shapes.append(tensor.shape if tensor else None)
    if out_shape is None or any(s is None for s in shapes):
        return "unknown"
    kinds = set()
    for shape in shapes:
        full = (1,) * (len(out_shape) - len(shape)) + tuple(shape)
        if full == tuple(out_shape):
            kinds.add("same")
        elif all(d == 1 for d in full):
            kinds.add("per_tensor")
        elif len(full) == 4 and full[2:] == (1, 1) and full[1] == out_shape[1]:
            kinds.add("per_channel")
        else:
            return "other"
    return "same" if kinds == {"same"} else sorted(kinds - {"same"})[0]


def _resize_facts(node, weights: dict, in_shape, out_shape) -> dict:
    mode = _string(node, "mode", "nearest")
    scales = None
    if len(node.input) > 2 and node.input[2] in weights and weights[node.input[2]].size:
        scales = tuple(float(s) for s in weights[node.input[2]].reshape(-1))
    elif in_shape and out_shape and all(d for d in (*in_shape, *out_shape)):
        scales = tuple(o / i for o, i in zip(out_shape, in_shape, strict=True))
    if scales is None or len(scales) != 4:
        return {"resize_mode": mode}
    hw = scales[2:]
    return {"resize_mode": mode, "scales_nc": scales[:2], "scales_hw": hw, "scales_hw_integer": all(float(s).is_integer() for s in hw)}
