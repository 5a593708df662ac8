"""Read an ONNX model into the facts the DLA rules check: per node, its parameters and tensor shapes.

Shapes come from ONNX shape inference on the prepared (static) model; a dimension that inference
cannot resolve makes `static` false. Weights (initializers, Constant nodes) are not activations.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sdk.errors import ModelError

FLOAT_TYPES = {1, 10, 16}  # onnx.TensorProto FLOAT, FLOAT16, BFLOAT16
COMPARISONS = ("Equal", "Greater", "Less")
CAST_TO_DLA = {1, 10, 3}  # Cast(to=FLOAT, FLOAT16, INT8): the types a DLA comparison's output may become


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


def load_inferred(path: Path):
    """An ONNX model with the shapes ONNX shape inference gives it (a prepared model's are static), or one ModelError."""
    import onnx

    try:
        return onnx.shape_inference.infer_shapes(onnx.load(str(path)), data_prop=True)
    except Exception as exc:  # onnx raises several unrelated types
        raise ModelError(f"{path}: not a readable ONNX model: {exc}") from None


def load_graph(path: Path) -> Graph:
    return graph_from_model(load_inferred(path))


def graph_from_model(model) -> Graph:
    from onnx import numpy_helper

    graph = model.graph
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
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
    consumers: dict[str, list] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    nodes, constants = [], []
    for index, node in enumerate(graph.node):
        if node.op_type == "Constant":
            constants.append(node.name or f"Constant_{index}")
            continue
        inputs = tuple(name for name in node.input if name and name not in weights)
        outputs = tuple(name for name in node.output if name)
        facts = _common_facts([tensors.get(n, Tensor(n, None, True)) for n in (*inputs, *outputs)])
        facts.update(_op_facts(node, [tensors.get(n) for n in inputs], [tensors.get(n) for n in outputs], weights, opset))
        if node.op_type in COMPARISONS:  # the bool output must go straight into a Cast to a DLA type
            after = [c for name in outputs for c in consumers.get(name, [])]
            facts["cast_after"] = bool(after) and all(c.op_type == "Cast" and _ints(c, "to", 0) in CAST_TO_DLA for c in after)
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


def _hw_class(values: tuple) -> str:
    """DLA deconvolution sizes: "small" (both 1-32), "long" (64, 96 or 128 by 1), else "other"."""
    if len(values) == 2 and all(1 <= v <= 32 for v in values):
        return "small"
    if len(values) == 2 and sorted(values) in ([1, 64], [1, 96], [1, 128]):
        return "long"
    return "other"


def _op_facts(node, inputs: list[Tensor | None], outputs: list[Tensor | None], weights: dict, opset: int = 17) -> dict:
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
        stride = _ints(node, "strides", (1,) * rank)
        return {
            "spatial_rank": rank,
            "kernel": kernel + kernel,  # aligned with pads (begin..., end...)
            "pads": pads,
            "stride": stride,
            "dilation": _ints(node, "dilations", (1,) * rank),
            "groups": groups,
            "out_channels": out_channels,
            "kernel_hw_class": _hw_class(tuple(kernel)),
            "stride_hw_class": _hw_class(tuple(stride)),
        }
    if op in ("MaxPool", "AveragePool"):
        window = _ints(node, "kernel_shape", ())
        return {
            "spatial_rank": len(window),
            "window": window,
            "stride": _ints(node, "strides", (1,) * len(window)),
            "pads": _ints(node, "pads", (0,) * (2 * len(window))),
        }
    if op in ("GlobalAveragePool", "GlobalMaxPool"):  # the parser builds a Reduce over H and W, not a Pooling layer
        return {"reduce_op": "max" if op == "GlobalMaxPool" else "avg", "reduce_batch": False}
    if op in ("ReduceMax", "ReduceMean", "ReduceSum", "ReduceMin"):
        return _reduce_facts(node, weights, in_shape, opset)
    if op == "Slice":
        return _slice_facts(node, weights, in_shape, out_shape)
    if op == "Clip":
        return {"clip_min": _clip_bound(node, 1, "min", weights, float("-inf")), "clip_max": _clip_bound(node, 2, "max", weights, float("inf"))}
    if op == "LRN":
        return {"size": _ints(node, "size", 0)}
    if op in COMPARISONS:  # bool out, by definition; DLA wants the inputs in floating point (INT8/FP16)
        return {"float": all(t is not None and t.float for t in inputs), "broadcast": _broadcast(node, inputs, weights, out_shape)}
    if op in ("MatMul", "Gemm"):
        return {"weights_constant": len(node.input) > 1 and node.input[1] in weights}
    if op in ("Add", "Sub", "Mul", "Max", "Min", "Div", "Pow"):
        return {"broadcast": _broadcast(node, inputs, weights, out_shape)}
    if op == "Concat":
        axis = _ints(node, "axis", 1)
        rank = len(out_shape) if out_shape else None
        return {"axis": axis % rank if rank and axis < 0 else axis, "inputs": len(inputs)}
    if op == "Softmax":
        return _softmax_facts(node, in_shape, opset)
    if op in ("Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze"):
        kept = bool(in_shape and out_shape and in_shape[0] == out_shape[0])
        if op == "Transpose":
            perm = _ints(node, "perm", ())
            kept = kept and (not perm or perm[0] == 0)
        return {"out_rank": len(out_shape) if out_shape is not None else None, "batch_kept": kept}
    if op == "Resize":
        return _resize_facts(node, weights, in_shape, out_shape, opset)
    return {}


def _reduce_facts(node, weights: dict, in_shape, opset: int) -> dict:
    axes = _ints(node, "axes", None)
    if (opset >= 18 or node.op_type == "ReduceSum" and opset >= 13) and len(node.input) > 1 and node.input[1]:
        value = weights.get(node.input[1])
        axes = tuple(int(a) for a in value.reshape(-1)) if value is not None else "computed"
    rank = len(in_shape) if in_shape else None
    if axes == "computed" or rank is None:
        batch = None  # unknown: not shown to fit
    elif not axes:  # no axes: every dimension, the batch too
        batch = True
    else:
        batch = 0 in {a % rank for a in (axes if isinstance(axes, tuple) else (axes,))}
    return {"reduce_op": {"ReduceMax": "max", "ReduceMin": "min", "ReduceSum": "sum"}.get(node.op_type, "avg"), "reduce_batch": batch}


def _softmax_facts(node, in_shape, opset: int) -> dict:
    """Opset 13 and later: one axis (default -1). Earlier: the parser flattens from `axis` (default 1) to 2-D."""
    rank = len(in_shape) if in_shape else None
    axis = _ints(node, "axis", -1 if opset >= 13 else 1)
    axis = axis % rank if rank and axis < 0 else axis
    facts = {"axis": axis, "softmax_flattened": opset < 13}
    if in_shape and rank == 4 and all(in_shape) and 1 <= axis <= 3:
        others = [in_shape[i] for i in (1, 2, 3) if i != axis]
        facts.update(softmax_axis_size=in_shape[axis], softmax_others_one=all(d == 1 for d in others))
    return facts


def _slice_facts(node, weights: dict, in_shape, out_shape) -> dict:
    names = list(node.input[1:5])
    values = [weights.get(n) if n else None for n in names]
    constant = all(v is not None for n, v in zip(names, values, strict=True) if n)
    if not constant or values[0] is None:
        return {"slice_constant": False}
    starts = [int(v) for v in values[0].reshape(-1)]
    rank = len(in_shape) if in_shape else None
    axes = [int(a) for a in values[2].reshape(-1)] if len(values) > 2 and values[2] is not None else list(range(len(starts)))
    steps = tuple(int(v) for v in values[3].reshape(-1)) if len(values) > 3 and values[3] is not None else (1,) * len(starts)
    batch = None
    if rank and in_shape and out_shape:
        batch = any(a % rank == 0 for a in axes) and (in_shape[0] != out_shape[0] or starts[[a % rank for a in axes].index(0)] != 0)
    return {"slice_constant": True, "slice_steps": steps, "slice_batch": batch}


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


def _resize_facts(node, weights: dict, in_shape, out_shape, opset: int = 17) -> dict:
    """How onnx-tensorrt sets up the IResizeLayer (builtin_op_importers.cpp 8.6-GA, Resize importer)."""
    mode = _string(node, "mode", "nearest")
    if opset < 11:  # opset 10: (X, scales), asymmetric, nearest rounds down
        scale_input, transform, rounding = 1, "asymmetric", "floor"
    else:
        scale_input = 2
        transform = _string(node, "coordinate_transformation_mode", "half_pixel")
        rounding = _string(node, "nearest_mode", "round_prefer_floor")
    sizes = opset >= 11 and len(node.input) > 3 and bool(node.input[3])
    scale_name = node.input[scale_input] if len(node.input) > scale_input else ""
    constant = scale_name in weights and weights[scale_name].size > 0
    facts = {"resize_mode": mode, "resize_input": "sizes" if sizes else "scales" if constant else "computed"}
    coordinate = {"half_pixel": "kHALF_PIXEL", "pytorch_half_pixel": "kHALF_PIXEL", "tf_half_pixel_for_nn": "kHALF_PIXEL"}.get(
        transform, {"asymmetric": "kASYMMETRIC", "align_corners": "kALIGN_CORNERS"}.get(transform, transform)
    )
    selector = "kUPPER" if transform == "pytorch_half_pixel" else "kFORMULA"
    if mode == "nearest":
        if transform == "tf_half_pixel_for_nn":
            round_mode = "kCEIL"
        else:
            rounds = {"floor": "kFLOOR", "ceil": "kCEIL", "round_prefer_floor": "kHALF_DOWN", "round_prefer_ceil": "kHALF_UP"}
            round_mode = rounds.get(rounding, rounding)
        facts["resize_combination"] = f"nearest/{coordinate}/{selector}/{round_mode}"
    else:
        facts["resize_combination"] = f"{mode}/{coordinate}/{selector}"
    scales = None
    if constant:
        scales = tuple(float(s) for s in weights[scale_name].reshape(-1))
    elif in_shape and out_shape and all(d for d in (*in_shape, *out_shape)):
        scales = tuple(o / i for o, i in zip(out_shape, in_shape, strict=True))
    if scales is None or len(scales) != 4:
        return facts
    hw = scales[2:]
    return facts | {"scales_nc": scales[:2], "scales_hw": hw, "scales_hw_integer": all(float(s).is_integer() for s in hw)}
