"""The performance model: each layer's time on an engine from a roofline, fusion, a launch cost, and DLA transitions.

A layer group (a convolution or GEMM with the batch norm, bias, activation and residual sum fused after it; on the GPU
also any chain of elementwise layers, as TensorRT's pointwise fusion runs them as one kernel; on ONNX Runtime the
Sigmoid x Mul of a Swish) costs one launch plus the larger of its compute time (FLOPs over the engine's rate for the
group's op class and precision) and its memory time (the bytes it reads and writes over the engine's bandwidth).
The engines are `HostEngine` (this CPU's measured peaks, tools/perf/host_peaks.py) and `DeviceEngine` (a module's
published peaks, tools/perf/platforms.py, with per-op-class efficiencies). With DLA, each layer runs where the DLA
placement prediction (tools/dla) puts it, and every tensor crossing between the GPU and a DLA subgraph costs a reformat
and a copy.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tools.perf.between_nodes import gap_after, profiler_ms
from tools.perf.layers import PRECISION_BYTES, Layer, ModelLayers
from tools.perf.nchwc import blocked_layers, nchwc_block, nchwc_kernels, reorders
from tools.perf.ort_threads import node_op, pool_nodes

HEADS = {"conv", "conv_pointwise", "conv_depthwise", "conv_transpose", "gemm"}
ACTIVATIONS = {"Relu", "Clip", "LeakyRelu", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "PRelu", "Elu"}
QDQ = {"QuantizeLinear", "DequantizeLinear"}
FREE_MOVEMENT = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout"}
GATES = {"Sigmoid", "Tanh", "HardSigmoid", "HardSwish", "Exp", "Erf", "Gelu", "Mish", "Softplus", "Elu"}  # non-piecewise-linear epilogues


@dataclass(frozen=True)
class Group:
    """Prepared layers that run as one: `head` names it, `members` in the model's order."""

    head: str
    members: tuple[str, ...]


@dataclass(frozen=True)
class LayerPrediction:
    head: str
    members: tuple[str, ...]
    op: str
    op_class: str
    engine: str  # cpu, gpu, dla
    precision: str
    flops: int
    bytes: int
    compute_ms: float
    memory_ms: float
    launch_ms: float
    ms: float
    bound: str  # compute, memory, launch
    shares: tuple[float, ...] = ()  # each member's part of `ms` (its standalone cost's share), for matching other groupings
    reorder_ms: float = 0.0  # ONNX Runtime's NCHWc reorders this group pays (included in `ms`)
    fusion: str = ""  # how TensorRT runs the group: "" (its own kernels), or why it has none (in place, folded, a view)
    threaded: bool = False  # the host: ONNX Runtime split its work over the pool's threads, woken for it


@dataclass(frozen=True)
class Transition:
    tensor: str
    direction: str  # "gpu->dla" or "dla->gpu"
    bytes: int
    ms: float


@dataclass
class Prediction:
    platform: str
    backend: str  # onnxruntime (host) or tensorrt
    precision: str
    layers: list[LayerPrediction]
    transitions: list[Transition] = field(default_factory=list)
    run_overhead_ms: float = 0.0
    notes: list[str] = field(default_factory=list)
    # The host: the model's time in a run without ONNX Runtime's profiler (a pipeline's run), where the peaks measured
    # the plain chains; `total_ms` is its time under the profiler, as `sdk profile` measures each layer (decision 1263)
    plain_ms: float | None = None

    @property
    def total_ms(self) -> float:
        return sum(p.ms for p in self.layers) + sum(t.ms for t in self.transitions) + self.run_overhead_ms

    def by_member(self) -> dict[str, LayerPrediction]:
        return {member: p for p in self.layers for member in p.members}


def fusion_groups(model: ModelLayers, backend: str, documented: bool = True) -> tuple[Group, ...]:
    """Conv/GEMM + (batch norms, constant scales and shifts, the residual sum, then one activation) as one; a Sigmoid
    and the Mul of its input (Swish) as one on either backend; on TensorRT also chains of elementwise layers. A layer
    joins its producer's group only as that producer's one consumer (what a fusion needs), the Swish's Mul excepted."""
    consumers: dict[str, int] = {}
    for layer in model.layers:
        for tensor in layer.inputs:
            consumers[tensor] = consumers.get(tensor, 0) + 1
    producer = {t: layer for layer in model.layers for t in layer.outputs}
    by_name = model.by_name()
    owner: dict[str, str] = {}
    members: dict[str, list[str]] = {}
    for layer in model.layers:
        head = _fuses_into(layer, [producer[t] for t in layer.inputs if t in producer], consumers, owner, members, by_name, backend)
        owner[layer.name] = head or layer.name
        members.setdefault(head or layer.name, []).append(layer.name)
    if backend == "tensorrt" and documented:  # `documented=False`: without TensorRT's generic-activation fusion (to compare)
        from tools.perf.trt_fusion import generic_activations

        members = generic_activations(model, members)
    return tuple(Group(head, tuple(names)) for head, names in members.items())


def _fuses_into(layer: Layer, sources: list[Layer], consumers: dict, owner: dict, members: dict, by_name: dict, backend: str) -> str | None:
    for source in sources:
        if layer.op == "Mul" and source.op == "Sigmoid" and set(source.inputs) <= set(layer.inputs):
            return owner[source.name]  # Swish: ONNX Runtime's QuickGelu, TensorRT's pointwise kernel
        if not all(consumers.get(t, 0) == 1 for t in source.outputs):
            continue
        head = by_name[owner[source.name]]
        ops = {by_name[m].op for m in members[head.name]}
        if head.op_class in HEADS and not ops & ACTIVATIONS:
            affine = layer.op in ("Mul", "Add", "Sub", "Div") and len(layer.inputs) == 1  # a scale or shift by a constant
            if affine and (backend != "onnxruntime" or ort_folds_constant(layer, head)):
                return head.name
            if not affine and layer.op in ACTIVATIONS | {"BatchNormalization", "Add"}:
                return head.name  # batch norm, bias, scale, the residual sum, then one activation
        if backend == "tensorrt" and layer.op_class == "elementwise" and head.op_class == "elementwise" and not {layer.op, head.op} & QDQ:
            return head.name  # pointwise fusion (Q/DQ are folded into their quantized layers instead)
    return None


def ort_folds_constant(layer: Layer, head: Layer) -> bool:
    """ONNX Runtime folds a constant Mul or Add into the convolution before it (its ConvMulFusion and ConvAddFusion
    rewrite rules) only when the constant is the second input and is a scalar (Mul) or one value per output channel
    (C x 1 x 1 or 1 x C x 1 x 1); any other scale or shift, and every Sub and Div, runs as a node of its own (decision
    1142). Heads other than a convolution keep the general rule."""
    if head.op != "Conv":
        return True
    position, shape = layer.attrs.get("constant", (0, ()))
    if layer.op not in ("Mul", "Add") or position != 1:
        return False
    channels = head.channels[1] if head.channels else 0
    return (layer.op == "Mul" and shape == ()) or shape in ((channels, 1, 1), (1, channels, 1, 1))


def group_facts(group: Group, model: ModelLayers, precision: str) -> tuple[Layer, int, int]:
    """(the group's main layer, its FLOPs, the bytes it moves: external inputs, weights and final outputs)."""
    by_name = model.by_name()
    layers = [by_name[m] for m in group.members]
    main = max(layers, key=lambda layer: (layer.flops, layer.bytes_moved(precision)))
    inside = {t for x in layers for t in x.outputs}
    size = PRECISION_BYTES[precision]
    read = {t: _count(s) for x in layers for t, s in zip(x.inputs, x.input_shapes, strict=False) if t not in inside}
    written = sum(_count(s) for s in layers[-1].output_shapes)
    moved = (sum(read.values()) + sum(x.weight_elements for x in layers) + written) * size
    if all(x.op in FREE_MOVEMENT for x in layers):
        moved = 0  # a view: nothing is copied
    return main, sum(x.flops for x in layers), moved


def _count(shape: tuple[int, ...]) -> int:
    total = 1
    for d in shape:
        total *= d
    return total if shape else 0


def _layer_key(layer: Layer) -> tuple:
    """Everything of a layer that its group's predicted time depends on (all but its index), made once per layer object
    (the resized models of `sdk optimize` share every layer they leave unchanged)."""
    key = layer.__dict__.get("_key")
    if key is None:
        key = (layer.name, layer.op, layer.op_class, layer.inputs, layer.outputs, layer.input_shapes, layer.output_shapes, layer.macs,
               layer.flops, layer.weight_elements, layer.input_elements, layer.output_elements, layer.channels, layer.kernel, layer.groups,
               layer.strides, tuple(sorted(layer.attrs.items())))  # fmt: skip
        object.__setattr__(layer, "_key", key)  # a cache beside the frozen fields, not one of them
    return key


def _predict_group(group: Group, model: ModelLayers, engine, precision: str, free: str = "", memo: dict | None = None) -> LayerPrediction:
    """The group's prediction. `memo`: one caller's store of predictions by the group's layers (for one set of engine
    peaks): a model that differs from the last only in a few layers' channels (`sdk optimize`'s allocation predicts
    hundreds of them) costs only the groups it changed; what is returned is the same as without it."""
    if memo is not None:
        by_name = model.by_name()
        engine_key = (engine.name, precision, free, getattr(engine, "sparse", False), getattr(engine, "image_inputs", None))
        # an NCHWc kernel, and a node ONNX Runtime splits over its threads, are costed as threaded
        split = tuple((m in getattr(engine, "nchwc", ()), m in getattr(engine, "pooled", ())) for m in group.members)
        key = (*engine_key, group.head, split, tuple(_layer_key(by_name[m]) for m in group.members))
        found = memo.get(key)
        if found is None:
            found = memo[key] = _predict_group(group, model, engine, precision, free)
        return found
    main, flops, moved = group_facts(group, model, precision)
    if free:  # no kernel of its own (TensorRT: a concatenation written in place, a reshape, a folded Q/DQ)
        return LayerPrediction(group.head, group.members, main.op, main.op_class, engine.name, precision, flops, 0, 0.0, 0.0, 0.0, 0.0,
                               "none", (0.0,) * len(group.members), fusion=free)  # fmt: skip
    by_name = model.by_name()
    gated = any(by_name[m].op in GATES for m in group.members)
    cost = engine.cost(main, flops, moved, gated=gated, swish=node_op([by_name[m] for m in group.members]) == "QuickGelu")
    alone = [engine.cost(by_name[m], by_name[m].flops, group_facts(Group(m, (m,)), model, precision)[2]).ms for m in group.members]
    shares = tuple(cost.ms * a / sum(alone) for a in alone) if sum(alone) > 0 else (cost.ms,) + (0.0,) * (len(alone) - 1)
    return LayerPrediction(
        group.head, group.members, main.op, main.op_class, engine.name, precision, flops, moved,
        cost.compute_ms, cost.memory_ms, cost.launch_ms, cost.ms, cost.bound, shares, threaded=cost.threaded,
    )  # fmt: skip


def predict_host(model: ModelLayers, peaks, block: int | None = None, contention=None, memo: dict | None = None) -> Prediction:
    """ONNX Runtime's per-layer times on this CPU (`--platform host`), FP32, with the NCHWc reorders it inserts.
    `contention` (tools/perf/host_speed.py, measured during a profile): how the machine stretches long kernels; each
    node's predicted time is multiplied by its factor for that time."""
    from dataclasses import replace

    from tools.perf.engines import HostEngine

    def stretch(ms: float) -> float:
        return contention.factor(ms) if contention is not None else 1.0

    block = nchwc_block() if block is None else block
    groups = fusion_groups(model, "onnxruntime")
    blocked = blocked_layers(model, block, groups)
    kernels = nchwc_kernels(model, block, groups, blocked)
    by_name = model.by_name()
    engine = HostEngine(peaks, block, kernels, pool_nodes(groups, by_name, peaks.threads, kernels))
    extra: dict[str, float] = {}
    found = reorders(model, block, groups, blocked)
    gaps = spared = 0.0  # ONNX Runtime's own work after each node it runs, and what its profiler adds to each
    for name, _side, elements in found:
        # A reorder is a pass over the tensor the node before it has just written, its bytes at the hot chain's rate
        # (decision 1200). ONNX Runtime hands its channel blocks to the thread pool (nchwc_ops.cc): a pass of more than
        # WOKEN_MS wakes the pool's threads, a threaded node's launch; a smaller one is done by the calling thread
        # before they can start (decision 1259).
        moved = 2 * 4 * elements  # read and written once
        work = moved / (engine.bandwidth_gbs(moved, hot=True) * 1e6)
        woken = engine.woken(work)
        ms = (engine.threaded_launch_ms if woken else peaks.launch_ms) + work
        extra[name] = extra.get(name, 0.0) + ms * stretch(ms)  # each reorder is a node of its own
        gaps, spared = gaps + gap_after(peaks, moved, woken), spared + profiler_ms(peaks, woken)
    layers = []
    for group in groups:
        p = _predict_group(group, model, engine, "fp32", memo=memo)
        activations = max(p.bytes - 4 * sum(by_name[m].weight_elements for m in group.members), 0)
        gaps, spared = gaps + gap_after(peaks, activations, p.threaded), spared + profiler_ms(peaks, p.threaded)
        if (factor := stretch(p.ms)) != 1.0:
            p = replace(p, compute_ms=p.compute_ms * factor, memory_ms=p.memory_ms * factor, launch_ms=p.launch_ms * factor, ms=p.ms * factor,
                        shares=tuple(share * factor for share in p.shares))  # fmt: skip
        added = [extra.get(m, 0.0) for m in group.members]
        if any(added):
            shares = tuple(a + b for a, b in zip(p.shares, added, strict=True))
            p = replace(p, ms=p.ms + sum(added), shares=shares, reorder_ms=sum(added))
        layers.append(p)
    if layers and peaks.wake_ms > 0:
        # The first node a run starts wakes ONNX Runtime's threads, asleep since the last frame (decision 1255).
        first, wake = layers[0], peaks.wake_ms
        shares = (first.shares[0] + wake, *first.shares[1:]) if first.shares else ()
        layers[0] = replace(first, launch_ms=first.launch_ms + wake, ms=first.ms + wake, shares=shares)
    prediction = Prediction("host", "onnxruntime", "fp32", layers, run_overhead_ms=gaps)
    if peaks.plain_node_ms > 0:
        # Without the profiler (decisions 1263, 1264): each node, reorders too, is spared what the profiler adds to it
        prediction.plain_ms = prediction.total_ms - spared
    return prediction


def predict_device(model: ModelLayers, machine, precision: str, placement=None, sparse: bool = False, dla_core: int = 0,
                   documented: bool = True, image_input: bool = False, memo: dict | None = None) -> Prediction:  # fmt: skip
    """TensorRT on a module's GPU, or on its DLA core `dla_core` (at that core's clock in the power mode) where
    `placement` (tools/dla's report) puts a layer, with the reformat and copy of every tensor crossing between the GPU
    and a DLA subgraph. `documented=False` leaves out TensorRT's fusions beyond a convolution's own epilogue and a
    pointwise chain (tools/perf/trt_fusion.py): what they are worth is the difference. `image_input`: the model's
    inputs reach the DLA in its image format (TensorRT's kDLA_HWC4, as `trtexec --inputIOFormats=int8:dla_hwc4`
    builds them), so a first convolution of up to 4 channels runs in the DLA's image-input mode (decision 1140)."""
    from tools.perf.engines import DLA_SUBGRAPH_MS, DeviceEngine

    gpu = DeviceEngine(machine.gpu, precision, sparse)
    images = frozenset(model.inputs) if image_input else frozenset()
    dla = DeviceEngine(machine.dla.on_core(dla_core), precision, sparse, images) if machine.dla is not None else None
    on_dla = {v.name: v.subgraph for v in placement.layers if v.device == "DLA"} if placement is not None and dla is not None else {}
    groups, free = _tensorrt_structure(model, documented, memo)
    layers = []
    for group in groups:
        engine = dla if group.head in on_dla else gpu
        why = free.get(group.head, "") if len(group.members) == 1 and engine is gpu else ""
        layers.append(_predict_group(group, model, engine, engine.precision, why, memo))
    prediction = Prediction(machine.platform, "tensorrt", precision, layers)
    prediction.notes.extend(unconfirmed_notes(machine, layers))
    if on_dla:
        prediction.transitions = transitions(model, on_dla, precision, machine.gpu.memory_gbs)
        prediction.run_overhead_ms = DLA_SUBGRAPH_MS * len(set(on_dla.values()))
        prediction.notes.append(f"{len(set(on_dla.values()))} DLA subgraph(s), {len(prediction.transitions)} GPU<->DLA transition(s)")
    return prediction


def _tensorrt_structure(model: ModelLayers, documented: bool, memo: dict | None) -> tuple[tuple[Group, ...], dict[str, str]]:
    """TensorRT's fusion groups and kernel-free layers of the model. They follow from the graph alone (each layer's name,
    op, class, inputs and outputs, and the model's inputs and outputs), never from shapes: with a `memo`, the resized
    models of one graph (`sdk optimize`'s allocation) find them once."""
    from tools.perf.trt_fusion import free_layers

    key = None
    if memo is not None:
        graph = tuple((x.name, x.op, x.op_class, x.inputs, x.outputs) for x in model.layers)
        key = ("tensorrt-structure", documented, graph, tuple(model.inputs), tuple(model.outputs))
        if key in memo:
            return memo[key]
    found = (fusion_groups(model, "tensorrt", documented), free_layers(model) if documented else {})
    if key is not None:
        memo[key] = found
    return found


def unconfirmed_notes(machine, layers: list[LayerPrediction]) -> list[str]:
    """The ratios behind this prediction that no NVIDIA figure confirms (platform_facts.yaml, precision.unconfirmed)."""
    from tools.perf.platforms import platform_facts

    unconfirmed = platform_facts()["precision"].get("unconfirmed", {})
    notes = []
    if any(p.engine == "dla" and p.precision == "fp16" for p in layers):
        notes.append(f"unconfirmed: {unconfirmed['dla_fp16']}")
    if machine.architecture == "blackwell" and any(p.engine == "gpu" and p.precision == "int8" for p in layers):
        notes.append(f"unconfirmed: {unconfirmed['blackwell_int8']}")
    return notes


def transitions(model: ModelLayers, on_dla: dict[str, int], precision: str, memory_gbs: float) -> list[Transition]:
    """Every tensor that crosses between the GPU and a DLA subgraph (or between two subgraphs), once per consuming
    side: TensorRT reformats it (DLA and GPU layouts differ) and copies it: read and written twice, plus a fixed cost."""
    from tools.perf.engines import GPU_BANDWIDTH_EFFICIENCY, TRANSITION_MS

    def where(name: str) -> tuple:
        return ("dla", on_dla[name]) if name in on_dla else ("gpu",)

    producer = {t: layer for layer in model.layers for t in layer.outputs}
    found = []
    for layer in model.layers:
        for tensor, shape in zip(layer.inputs, layer.input_shapes, strict=False):
            if tensor not in producer or where(producer[tensor].name) == where(layer.name):
                continue
            key = (tensor, where(layer.name))
            if any((t.tensor, t.direction) == (key[0], f"{where(producer[tensor].name)[0]}->{key[1][0]}") for t in found):
                continue
            moved = 4 * _count(shape) * PRECISION_BYTES[precision]
            ms = TRANSITION_MS + moved / (memory_gbs * GPU_BANDWIDTH_EFFICIENCY * 1e6)
            found.append(Transition(tensor, f"{where(producer[tensor].name)[0]}->{where(layer.name)[0]}", moved, ms))
    return found
