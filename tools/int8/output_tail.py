"""What stays out of INT8 in every model: the output tail, and the ranges no calibration method may clip (decision 1125).

TensorRT's guidance for explicit quantization (its developer guide, "Explicit Quantization", Q/DQ layer placement):
quantize the inputs of weighted layers (Convolution, Deconvolution, GEMM), where INT8 pays, and leave their outputs
in higher precision where an activation follows. `WEIGHTED_OPS` and `write_qdq(..., weighted_inputs=True)` place
Q/DQ so (a layer kept out of INT8 then reads the float tensor; with ONNX Runtime's own placement the producer's
output Q/DQ still clips it), measured but not yet the SDK's default (decision 1125).

A detector's head ends in a tail after its last weighted layers: score activations (Sigmoid, Softmax) and data
movement (Concat, Reshape, Transpose) laying the predictions out as the model's outputs. Quantized, it costs
accuracy and buys no speed: a concatenation of box regressions (a few units) with scores (0..1) shares one INT8
scale; a score step of amax/127 moves a detection across the threshold; the outputs would carry INT8 error into
every decoder.

`output_tail` finds those nodes in any graph: walking back from the graph outputs through data-movement ops and
bounded activations, a node joins the tail when every tensor it writes is read only by the tail (or is a graph
output); every Q/DQ model excludes them, whatever its placement. `bounded_outputs`: an activation of bounded range
(Sigmoid's (0, 1), Softmax's [0, 1]) keeps its observed maximum as its range whatever the method (the TensorRT
caches give every tensor a range): entropy and percentile follow the histogram's mass, which for a score sits
near 0, and would clip every confident score.
"""

from __future__ import annotations

# Weighted layers: `write_qdq(weighted_inputs=True)` quantizes their inputs (activation and weight) and nothing else.
WEIGHTED_OPS = ("Conv", "ConvTranspose", "Gemm", "MatMul")
# Ops whose output holds (a selection or arrangement of) their inputs' values: no arithmetic to do in INT8.
DATA_MOVEMENT_OPS = frozenset({"Concat", "Reshape", "Transpose", "Slice", "Squeeze", "Unsqueeze", "Flatten", "Identity", "Split", "Gather"})
# Activations with a bounded output range: scores and probabilities.
BOUNDED_ACTIVATIONS = frozenset({"Sigmoid", "Softmax", "LogSoftmax"})
TAIL_OPS = DATA_MOVEMENT_OPS | BOUNDED_ACTIVATIONS


def output_tail(graph) -> list[str]:
    """Names of the nodes of the output tail (module docstring), in graph order."""
    outputs = {o.name for o in graph.output}
    readers: dict[str, list] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    tail: set[int] = set()
    changed = True
    while changed:  # to a fixed point: a node joins once all its readers have
        changed = False
        for node in reversed(graph.node):
            if id(node) in tail or node.op_type not in TAIL_OPS:
                continue
            written = [name for name in node.output if name]
            if (
                written
                and all(name in outputs or readers.get(name) for name in written)
                and all(id(reader) in tail for name in written for reader in readers.get(name, ()))
            ):
                tail.add(id(node))
                changed = True
    return [node.name for node in graph.node if id(node) in tail]


def bounded_outputs(graph) -> frozenset[str]:
    """The tensors written by an activation of bounded range (BOUNDED_ACTIVATIONS): their range is their observed
    maximum, never a histogram's clip."""
    return frozenset(node.output[0] for node in graph.node if node.op_type in BOUNDED_ACTIVATIONS and node.output)
