"""Which of a model's elementwise and pooling nodes ONNX Runtime splits over its intra-op thread pool (decision 1260).

A node ONNX Runtime splits pays what waking the pool's threads costs, however little it has to do; a node it runs on
the calling thread does not. The convolutions, GEMMs and NCHWc kernels follow MLAS's own rules
(tools/perf/engines.py: HostEngine.threaded); the rest follow ONNX Runtime's:

- Most elementwise kernels ask `ThreadPool::TryParallelFor` with a per-element cost, and Eigen's cost model
  (`TensorCostModel::numThreads`) gives a loop of N elements at c cycles each
  min(threads, int((N c - 100000) / 100000 + 0.9)) threads, where c is 11/64 of a cycle for each byte loaded and
  stored plus the compute cycles the kernel declares (`ElementWiseRangedTransform::Cost`; the binary kernels' unit
  cost). One float in and one out: 1.375 cycles of memory.
- Clip, QuickGelu and Erf split their elements into tasks of a fixed size: more than one task runs on the pool.
- A global pool that is not an NCHWc kernel always runs on the pool, at every size checked.
- Concat copies each input as such a loop (one cycle an element): it runs on the pool when its largest input does.

Checked against ONNX Runtime's own profiler, which records for each node whether it was handed to the pool
(`thread_scheduling_stats`): tests/tools/perf/test_ort_threads.py finds each threshold in the running ONNX Runtime.
Every other node is taken to run on the calling thread. In the benchmark models ONNX Runtime's profiler showed it
never split a Resize or a lone BatchNormalization; it split some Transposes, Softmaxes and LayerNormalizations, by
rules not modelled.
"""

from __future__ import annotations

import math

from tools.perf.layers import Layer

STARTUP_CYCLES = 100_000  # Eigen's TensorCostModel: kStartupCycles
PER_THREAD_CYCLES = 100_000  # kPerThreadCycles
BYTE_CYCLES = 11 / 64  # kLoadCycles and kStoreCycles: an L2 access a 64-byte line
# The compute cycles an element each kernel declares: Relu's 1 and Sigmoid's 2 in activations.h, the binary kernels'
# unit cost of 1 (element_wise_ops.cc); the others read back from the thresholds the running ONNX Runtime shows.
ELEMENT_CYCLES = {
    "Add": 1.0, "Sub": 1.0, "Mul": 1.0, "Div": 1.0, "Relu": 1.0, "Tanh": 1.0, "HardSwish": 1.0, "Neg": 1.0, "Abs": 1.0,
    "Sigmoid": 2.0, "Exp": 2.0, "Sqrt": 2.0, "HardSigmoid": 0.5, "Softplus": 15.0, "LeakyRelu": 25.0, "Concat": 1.0,
    "LRN": 319.0,  # not read from the source: ONNX Runtime splits an LRN from 641-672 elements (the test checks 656)
}  # fmt: skip
# Kernels that cut their elements into tasks of this many (read off the running ONNX Runtime: it splits a Clip from
# 16,385-16,640 elements, a QuickGelu or an Erf from 4,097-4,160): more than one task runs on the pool.
TASK_ELEMENTS = {"Clip": 16384, "QuickGelu": 4096, "Erf": 4096}
POOLED = {"GlobalAveragePool", "GlobalMaxPool"}


def eigen_threads(elements: int, cycles: float, threads: int) -> int:
    """The threads Eigen's cost model gives a loop of `elements` at `cycles` each (TensorCostModel::numThreads)."""
    found = int((elements * cycles - STARTUP_CYCLES) / PER_THREAD_CYCLES + 0.9)
    return min(threads, max(1, found))


def ort_splits(op: str, elements: int, threads: int, element_bytes: int = 4) -> bool:
    """Whether ONNX Runtime runs a node of `op` over `elements` output elements on its thread pool."""
    if threads <= 1:
        return False
    if op in POOLED:
        return True
    if op in TASK_ELEMENTS:
        return elements > TASK_ELEMENTS[op]
    if op in ELEMENT_CYCLES:
        return eigen_threads(elements, 2 * element_bytes * BYTE_CYCLES + ELEMENT_CYCLES[op], threads) > 1
    return False


def node_op(layers: list[Layer]) -> str:
    """The ONNX Runtime node a group of layers runs as: a Sigmoid and the Mul of its input by it are QuickGelu (ONNX
    Runtime's fusion); otherwise the group's first layer's op."""
    ops = [layer.op for layer in layers]
    if sorted(ops) == ["Mul", "Sigmoid"]:
        return "QuickGelu"
    return ops[0]


def pool_nodes(groups, by_name: dict[str, Layer], threads: int, nchwc: frozenset[str] = frozenset()) -> frozenset[str]:
    """The names of the layers of the elementwise, pooling, normalisation and Concat groups ONNX Runtime runs on its
    thread pool (an NCHWc kernel is threaded by its own rule and left out)."""
    found = set()
    for group in groups:
        layers = [by_name[m] for m in group.members]
        head = layers[0]
        if head.op_class not in ("elementwise", "pool", "normalization", "movement") or any(m in nchwc for m in group.members):
            continue
        shapes = head.input_shapes if head.op == "Concat" else head.output_shapes[:1]  # Concat: its largest input
        elements = max((math.prod(shape) for shape in shapes if shape), default=0)
        if ort_splits(node_op(layers), elements, threads):
            found.update(group.members)
    return frozenset(found)
