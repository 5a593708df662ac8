"""ONNX Runtime's NCHWc transform on x86-64 (onnxruntime/core/optimizer/nchwc_transformer.cc): which layers run on
blocked tensors, which of them as NCHWc kernels (split over every thread), and where a tensor is reordered between
NCHW and the blocked layout. The rules are checked against the graph ONNX Runtime itself optimises
(tests/tools/perf/test_nchwc.py; decision 1259). `groups`: tools/perf/predict.py's fusion_groups for ONNX
Runtime, what it fuses into each convolution."""

from __future__ import annotations

import math

from tools.perf.layers import Layer, ModelLayers

# What stays blocked after a blocked tensor; ONNX Runtime removes Dropout and Identity, so the tensor passes through.
NCHWC_OPS = {"Concat", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "Relu", "Sigmoid", "Tanh", "LeakyRelu",
             "HardSigmoid", "Clip", "BatchNormalization", "Resize", "Upsample", "Dropout", "Identity"}  # fmt: skip
NCHWC_BINARY = {"Add", "Sum", "Mul"}  # blocked only when its operands are blocked activations of one shape (no constant, no broadcast)
NCHWC_KERNELS = {"Conv", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "Resize", "Upsample", "BatchNormalization"}
WINDOW_POOLS = {"MaxPool", "AveragePool"}  # reordered into the blocked layout whatever their input


def nchwc_block() -> int:
    """The channel block of ONNX Runtime's NCHWc layout on this CPU: 16 with AVX-512, 8 with AVX2; 0 (no NCHWc
    transform) elsewhere, as on Arm."""
    import platform

    if platform.machine().lower() not in ("x86_64", "amd64"):
        return 0
    try:
        flags = next((line for line in open("/proc/cpuinfo") if line.startswith("flags")), "")  # noqa: SIM115
    except OSError:
        return 8
    return 16 if " avx512f" in flags else 8 if " avx2" in flags else 0


def blocked_layers(model: ModelLayers, block: int, groups: tuple) -> frozenset[str]:
    """The layers ONNX Runtime's NCHWc transform runs on blocked tensors (onnxruntime/core/optimizer/
    nchwc_transformer.cc; decision 1259). 2-D convolutions run blocked (their channels padded to the block) where the
    transform takes them (nchwc_capable) and no HardSwish follows, and so do MaxPool and AveragePool whatever their
    input, where their channels are whole blocks. After a blocked tensor stay blocked: what is fused into its
    convolution, activations, global pooling, resize, batch norm, x * Sigmoid(a * x), a Concat of whole blocks along
    the channels, and Add/Mul of blocked tensors of one shape."""
    if not block:
        return frozenset()
    producer = {t: layer for layer in model.layers for t in layer.outputs}
    consumers: dict[str, list[Layer]] = {}
    for layer in model.layers:
        for t in layer.inputs:
            consumers.setdefault(t, []).append(layer)
    # What ONNX Runtime fuses into a convolution before the transform (its bias, scale, residual sum, activation) runs
    # inside the blocked kernel: the group's output is blocked where its convolution is.
    head_of = {m: g.head for g in groups for m in g.members}
    blocked: set[str] = set()
    for layer in model.layers:
        if head_of.get(layer.name, layer.name) != layer.name and head_of[layer.name] in blocked:
            blocked.add(layer.name)
            continue
        sources = [producer[t] for t in layer.inputs if t in producer]
        if _quick_gelu_scale(layer, sources, consumers) and all(s.name in blocked for s in sources):
            blocked.add(layer.name)  # x * Sigmoid(a * x): ONNX Runtime's QuickGelu, which runs on the blocked tensor
            continue
        unfused = any(c.op == "HardSwish" for c in consumers.get(layer.outputs[0], ())) if layer.outputs else False
        if layer.op == "Conv" and len(layer.kernel) == 2 and not unfused and nchwc_capable(layer, block):
            blocked.add(layer.name)  # output channels padded up to the block
        elif layer.op in WINDOW_POOLS and _rank4(layer) and layer.input_shapes and layer.input_shapes[0][1] % block == 0:
            blocked.add(layer.name)  # with a ReorderInput where its input is not blocked
        elif sources and all(s.name in blocked for s in sources) and _rank4(layer):
            binary = layer.op in NCHWC_BINARY and len(layer.inputs) >= 2 and not layer.weight_elements and len(set(layer.input_shapes)) == 1
            if layer.op == "Concat":  # along the channels, each input whole blocks
                aligned = layer.attrs.get("axis", 1) == 1 and all(len(s) > 1 and s[1] % block == 0 for s in layer.input_shapes)
                if aligned:
                    blocked.add(layer.name)
            elif layer.op in NCHWC_OPS or binary:
                blocked.add(layer.name)
    return frozenset(blocked)


def _quick_gelu_scale(layer: Layer, sources: list[Layer], consumers: dict[str, list[Layer]]) -> bool:
    """The scale of x * Sigmoid(a * x), which ONNX Runtime fuses into one QuickGelu node: a Mul of x by a scalar whose
    one consumer is a Sigmoid whose one consumer multiplies it by x."""
    if layer.op != "Mul" or len(sources) != 1 or layer.attrs.get("constant", (0, None))[1] not in ((), (1,)) or not layer.outputs:
        return False
    after = consumers.get(layer.outputs[0], [])
    if len(after) != 1 or after[0].op != "Sigmoid":
        return False
    last = consumers.get(after[0].outputs[0], [])
    return len(last) == 1 and last[0].op == "Mul" and set(sources[0].outputs) & set(last[0].inputs) != set()


def nchwc_kernels(model: ModelLayers, block: int, groups: tuple, blocked: frozenset[str] | None = None) -> frozenset[str]:
    """The blocked layers that run as ONNX Runtime's NCHWc kernels (convolution, pooling, resize, and a batch norm not
    fused into a convolution, which the transform makes a 1x1 depthwise one): each splits its work over every thread of
    the pool, however little it has (MLAS's NCHWc convolution and pooling take the pool's thread count;
    onnxruntime/core/mlas/lib/snchwc.cpp). `blocked`: blocked_layers' answer, where the caller has it."""
    blocked = blocked_layers(model, block, groups) if blocked is None else blocked
    heads = {g.head for g in groups}
    return frozenset(name for name in blocked if name in heads and model.by_name()[name].op in NCHWC_KERNELS)


def reorders(model: ModelLayers, block: int, groups: tuple, blocked: frozenset[str] | None = None) -> list[tuple[str, str, int]]:
    """Where ONNX Runtime's NCHWc transform reorders a tensor: (the layer whose group pays, input or output, elements).
    A blocked tensor goes back to NCHW (a ReorderOutput, once) for a consumer that is not blocked (blocked_layers),
    for a blocked convolution of fewer channels than a block (it reads NCHW) and as a model output; an NCHW tensor is
    reordered in (once) for a blocked convolution of at least `block` input channels or a blocked MaxPool or
    AveragePool. `blocked`: blocked_layers' answer, where the caller has it."""
    if not block:
        return []
    producer = {t: layer for layer in model.layers for t in layer.outputs}
    blocked = blocked_layers(model, block, groups) if blocked is None else blocked
    found = []
    reordered: set[str] = set()  # a tensor is reordered in once, however many blocked layers read it
    for layer in model.layers:
        for tensor, shape in zip(layer.inputs, layer.input_shapes, strict=False):
            source = producer.get(tensor)
            inside = source is not None and source.name in blocked
            wide = layer.op in WINDOW_POOLS or (layer.op == "Conv" and layer.channels and layer.channels[0] >= block)
            if layer.name in blocked and wide and not inside:
                if tensor not in reordered:
                    found.append((layer.name, "input", _elements(shape)))
                reordered.add(tensor)
            elif inside and (layer.name not in blocked or (layer.op == "Conv" and layer.channels and layer.channels[0] < block)):
                found.append((source.name, "output", _elements(shape)))  # a blocked convolution of fewer channels reads NCHW
    for layer in model.layers:  # the model's outputs leave in NCHW
        found += [(layer.name, "output", _elements(s)) for t, s in zip(layer.outputs, layer.output_shapes, strict=False)
                  if layer.name in blocked and t in model.outputs]  # fmt: skip
    unique = {(name, side, n) for name, side, n in found}
    return sorted(unique)


def _rank4(layer: Layer) -> bool:
    return bool(layer.output_shapes) and len(layer.output_shapes[0]) == 4


def _elements(shape: tuple[int, ...]) -> int:
    return math.prod(shape) if shape else 0


def nchwc_capable(layer: Layer, block: int) -> bool:
    """Whether ONNX Runtime's NCHWc transform takes a convolution (nchwc_transformer.cc, TransformConv): ungrouped,
    with fewer input channels than a block (read as NCHW) or a multiple of 4 (reordered and padded to whole blocks:
    what ReorderInput takes, nchwc_ops.cc); grouped, with whole blocks of output channels, and each group whole blocks
    unless depthwise. Checked against ONNX Runtime's own optimised graphs (tests/tools/perf/test_nchwc.py)."""
    if layer.op != "Conv" or not layer.channels:
        return True
    c_in, c_out = layer.channels
    if layer.groups <= 1:
        return c_in < block or c_in % 4 == 0
    if c_out % block:
        return False
    return layer.op_class == "conv_depthwise" or ((c_in // layer.groups) % block == 0 and (c_out // layer.groups) % block == 0)
