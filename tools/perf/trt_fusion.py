"""TensorRT's fusions beyond a convolution's own epilogue, as NVIDIA documents them (decision 1010).

- Generic activation (TensorRT Developer Guide, "Layer Fusion" > "Types of Fusions": "Convolution and Generic
  Activation": after pointwise fusion, a pointwise layer with one input and one output is a generic activation, and a
  convolution followed by one is fused into the convolution). So SiLU (Sigmoid and the Mul of the convolution's output
  by it), a LeakyReLU, a Clip or any chain of pointwise layers that reads only a convolution's output runs in the
  convolution's kernel. The convolution's output must feed nothing else (else it must be written anyway).
- Concatenation in place (NVIDIA Technical Blog, "Deploying Deep Neural Networks with NVIDIA TensorRT": TensorRT
  eliminates concatenation layers by preallocating the output buffer and having the layers before it write into it
  strided). A Concat whose every input is written by a layer of the network costs nothing; one of a network input
  is a copy.
- Shuffles that are views (TensorRT Developer Guide, "Optimizing Layer Performance" > "Shuffle": a shuffle equivalent
  to an identity on the underlying data is omitted, with no kernel or copy, when its input is used only by it and
  neither tensor is a network input or output): Reshape, Flatten, Squeeze, Unsqueeze, Identity (and Dropout at
  inference) under those conditions cost nothing.
- Q/DQ folded (TensorRT Developer Guide, "Working with Quantized Types" > "Q/DQ Layer-Placement" and "Q/DQ Fusion":
  DequantizeLinear is fused into the quantized convolution or GEMM it feeds, a QuantizeLinear into the layer before
  it; a DequantizeLinear of weights is applied at build time). A Q or DQ of a network input stays a kernel.
Split, Slice, Transpose and Pad stay kernels: no documented rule removes them in general.
"""

from __future__ import annotations

from tools.perf.layers import ModelLayers

VIEWS = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout"}
QDQ = {"QuantizeLinear", "DequantizeLinear"}
HEADS = {"conv", "conv_pointwise", "conv_depthwise", "conv_transpose", "gemm"}
IN_PLACE = "in place: its inputs' layers write into its output (no copy)"
VIEW = "a view: no kernel, no copy (a shuffle that is an identity on the data)"
FOLDED = "folded: Q/DQ fused into the quantized layer beside it"


def generic_activations(model: ModelLayers, members: dict[str, list[str]]) -> dict[str, list[str]]:
    """`members` (head -> names) with every all-pointwise group that reads only one convolution's (or GEMM's) output
    merged into that convolution's group, when that output feeds nothing else."""
    by_name = model.by_name()
    producer = {t: layer.name for layer in model.layers for t in layer.outputs}
    owner = {m: head for head, names in members.items() for m in names}
    consumers: dict[str, set[str]] = {}
    for layer in model.layers:
        for t in layer.inputs:
            consumers.setdefault(t, set()).add(layer.name)
    outputs = set(model.outputs)
    merged = {head: list(names) for head, names in members.items()}
    for head, names in members.items():
        if any(by_name[m].op_class != "elementwise" or by_name[m].op in QDQ for m in names):
            continue
        inside = {t for m in names for t in by_name[m].outputs}
        external = {t for m in names for t in by_name[m].inputs if t not in inside}
        if len(external) != 1:
            continue
        (tensor,) = external
        if tensor not in producer or tensor in outputs or not consumers.get(tensor, set()) <= set(names):
            continue
        target = owner[producer[tensor]]
        if by_name[target].op_class not in HEADS or target not in merged or merged[target][-1] != producer[tensor]:
            continue  # only onto the end of a convolution's own group
        merged[target].extend(names)
        for m in names:
            owner[m] = target
        del merged[head]
    return merged


def free_layers(model: ModelLayers) -> dict[str, str]:
    """Layers TensorRT runs no kernel for, with why: concatenations written in place, views, folded Q/DQ."""
    producer = {t: layer for layer in model.layers for t in layer.outputs}
    consumers: dict[str, int] = {}
    for layer in model.layers:
        for t in layer.inputs:
            consumers[t] = consumers.get(t, 0) + 1
    network = set(model.inputs) | set(model.outputs)
    free = {}
    for layer in model.layers:
        if layer.op == "Concat" and layer.inputs and all(t in producer for t in layer.inputs):
            free[layer.name] = IN_PLACE
        elif layer.op in VIEWS and layer.inputs and layer.inputs[0] in producer:
            tensors = {layer.inputs[0], *layer.outputs}
            if consumers.get(layer.inputs[0], 0) == 1 and not tensors & network:
                free[layer.name] = VIEW
        elif layer.op in QDQ and not set(layer.inputs) & set(model.inputs):
            free[layer.name] = FOLDED
    return free
