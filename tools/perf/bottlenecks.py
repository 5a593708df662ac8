"""The bottleneck report: the layers that take most of the time, what bounds each, and what would help, by rules.

Each rule is data: what it looks for, what it advises, and the source it rests on. The rules read a layer row
(tools/perf/analysis.py) and the run's context (the target's precision and engine, the DLA placement).
"""

from __future__ import annotations

from dataclasses import dataclass

SOURCES = {
    "tensor-cores": "NVIDIA TensorRT Best Practices, 'Optimizing for Tensor Cores': channel counts in multiples of 8 (FP16) and 32 (INT8) "
    "let the tensor cores run without padding (docs.nvidia.com/deeplearning/tensorrt/latest/performance/best-practices.html)",
    "memory-limited": "NVIDIA Deep Learning Performance guide, 'Memory-Limited Layers': elementwise, activation, pooling and depthwise "
    "layers have too few operations per byte to reach the math peak; fuse them or move fewer bytes "
    "(docs.nvidia.com/deeplearning/performance/dl-performance-memory-limited)",
    "dla-fallback": "NVIDIA TensorRT Developer Guide, 'Working with DLA' (GPU fallback) and the Deep-Learning-Accelerator-SW FAQ: a layer "
    "that leaves DLA splits its subgraph and each boundary reformats and copies a tensor (github.com/NVIDIA/Deep-Learning-Accelerator-SW)",
    "sparsity": "NVIDIA TensorRT Developer Guide, 'Structured Sparsity'; Deep-Learning-Accelerator-SW (DLA: INT8, more than 64 input "
    "channels, 1.24-1.47x images/s on two DLAs); TensorRT GitHub issues 2310 and 4065 (GPU gains for wide layers, about 256 channels up)",
    "roofline": "Williams, Waterman, Patterson, 'Roofline: an insightful visual performance model', CACM 52(4), 2009",
    "launch": "NVIDIA CUDA C++ Best Practices Guide, 'Kernel launch overhead' and CUDA Graphs: many tiny kernels cost their launches, not their work",
}


@dataclass(frozen=True)
class Advice:
    rule: str
    text: str
    source: str


def channel_alignment(row: dict, precision: str) -> Advice | None:
    align = {"fp16": 8, "int8": 32}.get(precision)
    channels = row.get("channels")
    if align is None or not channels or row.get("op_class") not in ("conv", "conv_pointwise", "gemm", "conv_transpose"):
        return None
    off = [c for c in channels if c % align]
    if not off:
        return None
    padded = [-(-c // align) * align for c in off]
    return Advice(
        "channels",
        f"channels {channels} are not multiples of {align} ({precision}): the tensor cores compute padding; "
        f"{' and '.join(f'{c} -> {p}' for c, p in zip(off, padded, strict=True))} would use them fully",
        "tensor-cores",
    )


def memory_bound(row: dict) -> Advice | None:
    if row.get("bound") != "memory" and row.get("op_class") not in ("conv_depthwise", "elementwise"):
        return None
    what = {"conv_depthwise": "a depthwise convolution", "elementwise": "an elementwise layer"}.get(row.get("op_class"), "this layer")
    return Advice(
        "memory",
        f"{what} is memory-bound (intensity {row.get('intensity')} FLOP/byte): fuse it into the layer before or after "
        "(one pass over the tensor), or move fewer bytes (lower precision, fewer channels)",
        "memory-limited",
    )


def compute_bound(row: dict, precision: str) -> Advice | None:
    if row.get("bound") != "compute":
        return None
    lower = {"fp32": "FP16 or INT8", "fp16": "INT8"}.get(precision)
    text = "compute-bound: fewer MACs help directly (channel pruning with reconstruction, a smaller input)"
    if lower:
        text += f"; {lower} raises the peak it runs against"
    return Advice("compute", text, "roofline")


def launch_bound(row: dict) -> Advice | None:
    if row.get("bound") != "launch":
        return None
    return Advice("launch", "launch-bound: the layer's work is smaller than the cost of running it; fuse it with its neighbours", "launch")


def dla_fallback(row: dict, fallbacks: dict[str, str]) -> Advice | None:
    hit = [name for name in row.get("fused", []) if name in fallbacks]
    if not hit:
        return None
    return Advice(
        "dla-fallback",
        f"{hit[0]} falls back from DLA to the GPU and costs two transitions (reformat and copy in and out): {fallbacks[hit[0]]}",
        "dla-fallback",
    )


def sparsity(row: dict, candidates: set[str]) -> Advice | None:
    hit = [name for name in row.get("fused", []) if name in candidates]
    if not hit:
        return None
    return Advice("sparsity", "a candidate for 2:4 structured sparsity on this target (prune 2:4 and fine-tune; gains only where compute-bound)",
                  "sparsity")  # fmt: skip


def advise(row: dict, precision: str, fallbacks: dict[str, str] | None = None, candidates: set[str] | None = None) -> list[Advice]:
    found = [
        dla_fallback(row, fallbacks or {}),
        channel_alignment(row, precision),
        memory_bound(row),
        compute_bound(row, precision),
        launch_bound(row),
        sparsity(row, candidates or set()),
    ]
    return [a for a in found if a is not None]


def bottlenecks(rows: list[dict], precision: str, count: int = 5, fallbacks=None, candidates=None, key: str = "measured_ms") -> list[dict]:
    """The `count` layers with the most time (measured, else predicted) with what bounds them and the advice."""
    timed = [r for r in rows if r.get(key) is not None]
    total = sum(r[key] for r in timed) or 1.0
    top = sorted(timed, key=lambda r: -r[key])[:count]
    return [
        {
            "name": r["name"],
            "op": r["op"],
            "ms": r[key],
            "share": round(r[key] / total, 4),
            "bound": r.get("bound"),
            "advice": [{"rule": a.rule, "text": a.text, "source": SOURCES[a.source]} for a in advise(r, precision, fallbacks, candidates)],
        }
        for r in top
    ]


def resolution_share(rows: list[dict], input_shape: tuple[int, ...] | None, key: str = "measured_ms") -> dict | None:
    """The input resolution's share: the time of layers that scale with the pixels (everything but launch-bound
    layers and GEMMs over pooled features), and what a 0.8x input (0.64x the pixels) would save of it."""
    if not input_shape or len(input_shape) < 4:
        return None
    timed = [r for r in rows if r.get(key) is not None]
    total = sum(r[key] for r in timed)
    scaling = sum(r[key] for r in timed if r.get("bound") != "launch" and r.get("op_class") != "gemm")
    if not total:
        return None
    return {
        "input": list(input_shape[-2:]),
        "share": round(scaling / total, 4),
        "saving_at_0.8x_ms": round(scaling * (1 - 0.64), 4),
        "text": f"{scaling / total:.0%} of the time scales with the input's pixels: an input of 0.8x the size "
        f"({int(input_shape[-2] * 0.8)}x{int(input_shape[-1] * 0.8)}) would save about {scaling * 0.36:.2f} ms",
    }
