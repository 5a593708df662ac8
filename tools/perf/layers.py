"""Per-layer static analysis of a prepared ONNX model: op, shapes, MACs, FLOPs, bytes moved, arithmetic intensity.

Conventions (docs/guides/bottlenecks.md, "How layers are counted"; tests/tools/perf/test_layers.py computes them by hand):
- A multiply-accumulate (MAC) is 2 FLOPs. Conv and ConvTranspose: MACs = N x Cout x out-spatial x Cin/group x kernel;
  a bias adds one FLOP per output element. Gemm / MatMul: MACs = M x N x K (x batch); Gemm's C adds one per output.
- Pooling: one FLOP per window element per output (a compare or an add); global pooling: one per input element.
- Resize: nearest 0 FLOPs; linear 2^d MACs per output element (d: resized dimensions), cubic 4^d.
- Elementwise and activations: one FLOP per output element (a few more for the transcendental ones, see ELEMENTWISE);
  data movement (Reshape, Transpose, Concat, Slice, Pad, ...): 0 FLOPs.
- Bytes moved: weights (initializers and Constant outputs the layer reads) + activations read + activations written, each
  element counted once at the layer's precision (fp32 4 bytes, fp16 2, int8 1); shape tensors (int64) at their own size.
Only the host runs this (it needs `onnx`); the device writes raw per-node times and the host maps them here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

PRECISION_BYTES = {"fp32": 4, "fp16": 2, "int8": 1}
# FLOPs per output element of elementwise ops and activations (a transcendental costs a few; a convention, not a measurement).
ELEMENTWISE = {
    "Add": 1, "Sub": 1, "Mul": 1, "Div": 1, "Max": 1, "Min": 1, "Pow": 1, "Sum": 1, "Mean": 1,
    "Relu": 1, "LeakyRelu": 2, "PRelu": 2, "Clip": 2, "Abs": 1, "Neg": 1, "Sqrt": 1, "Reciprocal": 1, "Floor": 1, "Ceil": 1,
    "Sigmoid": 4, "Tanh": 4, "Exp": 4, "Log": 4, "Erf": 4, "HardSigmoid": 3, "HardSwish": 4, "Elu": 4, "Selu": 4,
    "Softplus": 4, "Mish": 8, "Gelu": 8, "Equal": 1, "Greater": 1, "Less": 1, "Where": 1, "Not": 1, "And": 1, "Or": 1,
    "Cast": 1, "QuantizeLinear": 3, "DequantizeLinear": 2,
}  # fmt: skip
MOVEMENT = {
    "Reshape", "Transpose", "Concat", "Slice", "Split", "Pad", "Flatten", "Squeeze", "Unsqueeze", "Gather", "Expand",
    "Tile", "Identity", "Shape", "DepthToSpace", "SpaceToDepth", "ConstantOfShape", "Range", "GatherElements", "ScatterND",
}  # fmt: skip
POOLS = {"MaxPool", "AveragePool", "LpPool"}
GLOBAL_POOLS = {"GlobalAveragePool", "GlobalMaxPool"}
REDUCTIONS = {"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL2", "ArgMax", "ArgMin", "Softmax", "LogSoftmax"}


@dataclass(frozen=True)
class Layer:
    """One node of the prepared model with what it computes and moves."""

    index: int
    name: str
    op: str
    op_class: str  # conv, conv_depthwise, conv_pointwise, conv_transpose, gemm, pool, resize, elementwise, normalization, reduce, movement, other
    inputs: tuple[str, ...]  # activation tensors read (weights excluded)
    outputs: tuple[str, ...]
    input_shapes: tuple[tuple[int, ...], ...]
    output_shapes: tuple[tuple[int, ...], ...]
    macs: int
    flops: int
    weight_elements: int
    input_elements: int
    output_elements: int
    channels: tuple[int, int] | None = None  # (in, out) channels of a conv or gemm: what tensor cores want aligned
    kernel: tuple[int, ...] = ()
    groups: int = 1
    strides: tuple[int, ...] = ()
    attrs: dict = field(default_factory=dict)

    def bytes_moved(self, precision: str = "fp32") -> int:
        size = PRECISION_BYTES[precision]
        return (self.weight_elements + self.input_elements + self.output_elements) * size

    def weight_bytes(self, precision: str = "fp32") -> int:
        return self.weight_elements * PRECISION_BYTES[precision]

    def intensity(self, precision: str = "fp32") -> float:
        """FLOPs per byte moved (0 for a layer that moves nothing)."""
        moved = self.bytes_moved(precision)
        return self.flops / moved if moved else 0.0


@dataclass(frozen=True)
class ModelLayers:
    path: str
    layers: tuple[Layer, ...]
    inputs: dict[str, tuple[int, ...]]
    outputs: tuple[str, ...]

    def by_name(self) -> dict[str, Layer]:
        """name -> layer, made once per model (the performance model asks for it per layer group, hundreds of
        thousands of times in one `sdk optimize`); callers read it, never change it."""
        found = self.__dict__.get("_by_name")
        if found is None:
            found = {layer.name: layer for layer in self.layers}
            object.__setattr__(self, "_by_name", found)  # a cache beside the frozen fields, not one of them
        return found

    @property
    def flops(self) -> int:
        return sum(layer.flops for layer in self.layers)


def load_layers(path: Path) -> ModelLayers:
    """The layers of an ONNX model, shapes from ONNX shape inference (a prepared model has static shapes)."""
    from tools.dla.graph import load_inferred

    model = load_inferred(path)
    return layers_of(model, str(path), _run_shapes(model))


def _run_shapes(model) -> dict[str, tuple[int, ...]]:
    """Shapes ONNX shape inference left open (a Reshape to a computed shape), read from one run of the model by ONNX
    Runtime with every such tensor made an output; {} when the inputs are not static or the run fails."""
    import onnx

    known = {info.name for info in (*model.graph.input, *model.graph.value_info, *model.graph.output) if _dims(info) is not None}
    weights = {i.name for i in model.graph.initializer}
    missing = [t for node in model.graph.node if node.op_type != "Constant" for t in node.output if t and t not in known and t not in weights]
    inputs = [i for i in model.graph.input if i.name not in weights]
    if not missing or any(_dims(i) is None for i in inputs):
        return {}
    try:
        import numpy as np
        import onnxruntime as ort

        from sdk.profiling.onnxruntime_profile import NUMPY

        probe = onnx.ModelProto()
        probe.CopyFrom(model)
        probe.graph.output.extend([onnx.ValueInfoProto(name=name) for name in missing])
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        options.log_severity_level = 3
        session = ort.InferenceSession(probe.SerializeToString(), options, providers=["CPUExecutionProvider"])
        feeds = {a.name: np.zeros(a.shape, NUMPY.get(a.type, np.float32)) for a in session.get_inputs()}
        values = session.run(missing, feeds)
    except Exception:  # a model ONNX Runtime cannot run as it is: its open shapes stay open
        return {}
    return {name: tuple(int(d) for d in np.shape(value)) for name, value in zip(missing, values, strict=True)}


def _dims(value_info) -> tuple[int, ...] | None:
    tensor_type = value_info.type.tensor_type
    if not tensor_type.HasField("shape"):
        return None
    dims = tuple(d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else 0 for d in tensor_type.shape.dim)
    return None if 0 in dims else dims


def layers_of(model, path: str = "", run_shapes: dict[str, tuple[int, ...]] | None = None) -> ModelLayers:
    """Layers of a loaded (shape-inferred) ONNX model; Constant nodes are weights, not layers. `run_shapes`: shapes
    read from a run where inference left them open."""
    from onnx import numpy_helper

    graph = model.graph
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    weights: dict[str, tuple[int, ...]] = {i.name: tuple(i.dims) for i in graph.initializer}
    values: dict[str, object] = {}
    for node in graph.node:
        if node.op_type == "Constant":
            for attribute in node.attribute:
                if attribute.name == "value":
                    array = numpy_helper.to_array(attribute.t)
                    weights[node.output[0]] = tuple(array.shape)
                    values[node.output[0]] = array
    for initializer in graph.initializer:
        if math.prod(initializer.dims) <= 16:  # small constants: scales, sizes, axes the counts need
            values[initializer.name] = numpy_helper.to_array(initializer)
    shapes: dict[str, tuple[int, ...]] = dict(run_shapes or {})
    for info in (*graph.input, *graph.value_info, *graph.output):
        dims = _dims(info)
        if dims is not None:
            shapes[info.name] = dims
    layers, seen = [], set()
    for node in graph.node:
        if node.op_type == "Constant":
            continue
        name = node.name or f"{node.op_type}_{len(layers)}"
        if name in seen:  # ONNX does not require unique names; a layer's must be
            name = f"{name}#{len(layers)}"
        seen.add(name)
        layers.append(_layer(len(layers), name, node, shapes, weights, values, opset))
    inputs = {i.name: shapes.get(i.name, ()) for i in graph.input if i.name not in weights}
    return ModelLayers(path, tuple(layers), inputs, tuple(o.name for o in graph.output))


def _attr(node, name: str, default):
    for attribute in node.attribute:
        if attribute.name == name:
            if attribute.ints:
                return tuple(attribute.ints)
            if attribute.floats:
                return tuple(attribute.floats)
            if attribute.s:
                return attribute.s.decode()
            return attribute.i if attribute.type == 2 else attribute.f
    return default


def _nearest2x(node, opset: int, source: tuple, out: tuple) -> bool:
    """Whether ONNX Runtime's CPU Resize takes its nearest-2x path (a copy of each input pixel twice along a row,
    upsample.cc: UpsampleNearest2x): a 4-D tensor doubled in height and width alone, as an Upsample or a Resize of
    opset 10, or a Resize with asymmetric coordinates and floor rounding. Any other nearest Resize runs its general
    loop, an index lookup for each output element (tools/perf/engines.py; decision 1262)."""
    doubled = len(source) == len(out) == 4 and source[:2] == out[:2] and all(2 * s == o for s, o in zip(source[2:], out[2:], strict=True))
    if not doubled:
        return False
    if node.op_type == "Upsample" or opset < 11:
        return True
    coordinates = _attr(node, "coordinate_transformation_mode", "half_pixel")
    return coordinates == "asymmetric" and _attr(node, "nearest_mode", "round_prefer_floor") == "floor"


def _layer(index: int, name: str, node, shapes: dict, weights: dict, values: dict, opset: int = 0) -> Layer:
    act_in = tuple(t for t in node.input if t and t not in weights)
    outputs = tuple(t for t in node.output if t)
    in_shapes = tuple(shapes.get(t, ()) for t in act_in)
    out_shapes = tuple(shapes.get(t, ()) for t in outputs)
    weight_elements = sum(math.prod(weights[t]) for t in node.input if t in weights)
    input_elements = sum(math.prod(s) for s in in_shapes if s)
    output_elements = sum(math.prod(s) for s in out_shapes if s)
    base = dict(
        index=index, name=name, op=node.op_type, inputs=act_in, outputs=outputs, input_shapes=in_shapes, output_shapes=out_shapes,
        weight_elements=weight_elements, input_elements=input_elements, output_elements=output_elements,
    )  # fmt: skip
    out = out_shapes[0] if out_shapes else ()
    op = node.op_type
    if op in ("Conv", "ConvTranspose"):
        return _conv(node, base, shapes, weights, out)
    if op in ("Gemm", "MatMul", "MatMulInteger", "FusedMatMul"):
        return _gemm(node, base, shapes, weights, out)
    if op in POOLS:
        kernel = tuple(_attr(node, "kernel_shape", ()))
        return Layer(**base, op_class="pool", macs=0, flops=math.prod(out) * math.prod(kernel) if out else 0, kernel=kernel)
    if op in GLOBAL_POOLS:
        return Layer(**base, op_class="pool", macs=0, flops=input_elements)
    if op in ("Resize", "Upsample"):
        mode = _attr(node, "mode", "nearest")
        source = in_shapes[0] if in_shapes else ()
        resized = sum(1 for a, b in zip(source, out, strict=False) if a != b) if source and out else 2
        per = {"nearest": 0, "linear": 2**resized, "bilinear": 2**resized, "cubic": 4**resized}.get(mode, 0)
        attrs = {"mode": mode, "nearest2x": mode == "nearest" and _nearest2x(node, opset, source, out)}
        return Layer(**base, op_class="resize", macs=math.prod(out) * per if out else 0, flops=2 * math.prod(out) * per if out else 0,
                     attrs=attrs)  # fmt: skip
    if op in ("BatchNormalization", "InstanceNormalization", "LayerNormalization", "GroupNormalization", "LRN"):
        return Layer(**base, op_class="normalization", macs=0, flops=(2 if op == "BatchNormalization" else 5) * output_elements)
    if op in REDUCTIONS:
        flops = input_elements * (5 if op in ("Softmax", "LogSoftmax") else 1)
        return Layer(**base, op_class="reduce", macs=0, flops=flops)
    if op in ELEMENTWISE:
        constants = [(i, tuple(weights[t])) for i, t in enumerate(node.input) if t in weights]
        attrs = {"constant": constants[0]} if len(constants) == 1 else {}  # (its input position, its shape)
        return Layer(**base, op_class="elementwise", macs=0, flops=ELEMENTWISE[op] * output_elements, attrs=attrs)
    if op in MOVEMENT:
        attrs = {"perm": tuple(_attr(node, "perm", ()))} if op == "Transpose" else {"axis": int(_attr(node, "axis", 1))} if op == "Concat" else {}
        return Layer(**base, op_class="movement", macs=0, flops=0, attrs=attrs)
    return Layer(**base, op_class="other", macs=0, flops=output_elements)


def _conv(node, base: dict, shapes: dict, weights: dict, out: tuple) -> Layer:
    weight_shape = weights.get(node.input[1]) or shapes.get(node.input[1], ())
    groups = int(_attr(node, "group", 1))
    kernel = tuple(weight_shape[2:]) if len(weight_shape) > 2 else tuple(_attr(node, "kernel_shape", ()))
    in_shape = base["input_shapes"][0] if base["input_shapes"] else ()
    c_in = in_shape[1] if len(in_shape) > 1 else 0
    c_out = out[1] if len(out) > 1 else 0
    if node.op_type == "Conv":
        macs = math.prod(out) * (c_in // max(groups, 1)) * math.prod(kernel) if out else 0
    else:  # ConvTranspose: every input element scatters into Cout/group x kernel outputs
        macs = math.prod(in_shape) * (c_out // max(groups, 1)) * math.prod(kernel) if in_shape else 0
    has_bias = len(node.input) > 2 and bool(node.input[2])
    flops = 2 * macs + (math.prod(out) if has_bias and out else 0)
    if node.op_type == "ConvTranspose":
        op_class = "conv_transpose"
    elif groups > 1 and groups == c_in and c_in == c_out:
        op_class = "conv_depthwise"
    elif kernel and math.prod(kernel) == 1 and groups == 1:
        op_class = "conv_pointwise"
    else:
        op_class = "conv"
    strides = tuple(_attr(node, "strides", (1,) * len(kernel)))
    dilations = tuple(_attr(node, "dilations", ()))
    attrs = {"dilations": dilations} if any(d != 1 for d in dilations) else {}
    return Layer(**base, op_class=op_class, macs=macs, flops=flops, channels=(c_in, c_out), kernel=kernel, groups=groups, strides=strides,
                 attrs=attrs)  # fmt: skip


def _gemm(node, base: dict, shapes: dict, weights: dict, out: tuple) -> Layer:
    a = shapes.get(node.input[0]) or weights.get(node.input[0]) or ()
    b = weights.get(node.input[1]) or shapes.get(node.input[1]) or ()
    if node.op_type == "Gemm":
        k = (a[0] if _attr(node, "transA", 0) else a[-1]) if a else 0
        n = (b[0] if _attr(node, "transB", 0) else b[-1]) if b else 0
    else:
        k = a[-1] if a else 0
        n = b[-1] if b else 0
    macs = (math.prod(out) * k) if out else 0
    bias = node.op_type == "Gemm" and len(node.input) > 2 and bool(node.input[2])
    flops = 2 * macs + (math.prod(out) if bias and out else 0)
    return Layer(**base, op_class="gemm", macs=macs, flops=flops, channels=(int(k), int(n)))


def strided_transpose(layer: Layer) -> bool:
    """A Transpose whose permutation moves the innermost axis (each element read with a stride, not rows copied)."""
    if layer.op != "Transpose":
        return False
    perm = tuple(layer.attrs.get("perm", ()))
    rank = len(layer.input_shapes[0]) if layer.input_shapes and layer.input_shapes[0] else len(perm)
    last = perm[-1] if perm else 0  # no perm: the axes reversed
    return rank > 1 and last != rank - 1
