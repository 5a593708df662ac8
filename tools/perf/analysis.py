"""A profile's measured layers joined with the static analysis and the prediction: the rows of `sdk profile`.

Each row is one measured layer (tools/perf/mapping.py): what it computes and moves (tools/perf/layers.py), its measured
time over the frames (median, p90), its share of the model's time, what it achieved (GFLOP/s, GB/s), what bounds it
(from the roofline of the engine it ran on), and the prediction for the same prepared layers with the ratio
measured / predicted. The model's measured time is the sum of its layers' medians plus the median time between them
(each frame's run less its layers): medians per layer keep one layer's bad frame on a shared machine from inflating
the others (decision 0701); the run's own median and p90 are reported beside it.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from tools.perf.layers import PRECISION_BYTES, ModelLayers
from tools.perf.mapping import MeasuredLayer
from tools.perf.predict import Prediction


@dataclass(frozen=True)
class Totals:
    measured_ms: float
    predicted_ms: float | None
    run_median_ms: float
    run_p90_ms: float
    between_layers_ms: float
    unprofiled_median_ms: float | None
    profiling_overhead_ms: float | None
    predicted_plain_ms: float | None = None  # the host: the model's predicted time without the profiler (decision 1263)


def percentile(values: list[float], q: float) -> float:
    """The q-quantile (0..1) by linear interpolation between order statistics."""
    ordered = sorted(values)
    if not ordered:
        return 0.0
    position = (len(ordered) - 1) * q
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def ridge_point(peak_gflops: float, bandwidth_gbs: float) -> float:
    """The roofline's ridge: FLOPs per byte above which the peak, not the bandwidth, bounds a layer."""
    return peak_gflops / bandwidth_gbs if bandwidth_gbs else float("inf")


def classify_bound(flops: int, moved: int, peak_gflops: float, bandwidth_gbs: float, launch_ms: float = 0.0) -> str:
    """compute, memory, or launch: which of the roofline's three terms is largest for this layer."""
    compute = flops / (peak_gflops * 1e6) if flops and peak_gflops else 0.0
    memory = moved / (bandwidth_gbs * 1e6) if moved and bandwidth_gbs else 0.0
    if launch_ms >= max(compute, memory):
        return "launch"
    return "compute" if compute >= memory else "memory"


def layer_rows(model: ModelLayers, measured: tuple[MeasuredLayer, ...], times: dict[str, list[float]], prediction: Prediction | None,
               precision: str = "fp32") -> list[dict]:  # fmt: skip
    """One row per measured layer; `times` holds each executed node's time in each frame (ms)."""
    by_name = model.by_name()
    frames = max((len(v) for v in times.values()), default=0)
    per_member = _member_predictions(prediction)
    rows = []
    for group in measured:
        series = [sum(times[node][i] for node in group.executed if node in times) for i in range(frames)]
        median = statistics.median(series) if series else 0.0
        layers = [by_name[m] for m in group.members] or [None]
        rows.append(_row(group, layers, series, median, per_member, precision))
    total = sum(r["measured_ms"] for r in rows) or 1.0
    for row in rows:
        row["share"] = round(row["measured_ms"] / total, 4)
    return rows


def _member_predictions(prediction: Prediction | None) -> dict[str, tuple[float, object]]:
    """Each prepared layer's share of its predicted group (in proportion to what it would cost alone), so that a layer
    ONNX Runtime ran apart from the group the model fused it into still gets its part."""
    if prediction is None:
        return {}
    found = {}
    for p in prediction.layers:
        for member, share in zip(p.members, p.shares or (p.ms,), strict=False):
            found[member] = (share, p)
    return found


def _row(group: MeasuredLayer, layers: list, series: list[float], median: float, per_member: dict, precision: str) -> dict:
    size = PRECISION_BYTES[precision]
    real = [layer for layer in layers if layer is not None]
    main = max(real, key=lambda layer: (layer.flops, layer.bytes_moved(precision))) if real else None
    inside = {t for layer in real for t in layer.outputs}
    read = {t: _count(s) for layer in real for t, s in zip(layer.inputs, layer.input_shapes, strict=False) if t not in inside}
    weights = sum(layer.weight_elements for layer in real) * size
    act_in = sum(read.values()) * size
    act_out = sum(_count(s) for s in real[-1].output_shapes) * size if real else 0
    flops = sum(layer.flops for layer in real)
    moved = weights + act_in + act_out
    predicted = [per_member[m] for m in group.members if m in per_member]
    predicted_ms = sum(ms for ms, _ in predicted) if predicted else None
    heads = sorted((p for _, p in predicted), key=lambda p: -p.ms)
    seconds = median / 1e3
    return {
        "name": group.name,
        "op": main.op if main else (group.executed_ops[0] if group.executed_ops else ""),
        "op_class": main.op_class if main else "other",
        "fused": list(group.members),
        "executed": [f"{n} ({op})" for n, op in zip(group.executed, group.executed_ops, strict=True)],
        "input_shapes": [list(s) for s in (main.input_shapes if main else ())],
        "output_shapes": [list(s) for s in (real[-1].output_shapes if real else ())],
        "precision": precision,
        "macs": sum(layer.macs for layer in real),
        "flops": flops,
        "bytes": {"weights": weights, "activations_in": act_in, "activations_out": act_out, "total": moved},
        "intensity": round(flops / moved, 3) if moved else 0.0,
        "measured_ms": round(median, 4),
        "measured_p90_ms": round(percentile(series, 0.9), 4),
        "achieved_gflops": round(flops / seconds / 1e9, 3) if seconds > 0 else None,
        "achieved_gbs": round(moved / seconds / 1e9, 3) if seconds > 0 else None,
        "predicted_ms": round(predicted_ms, 4) if predicted_ms is not None else None,
        "ratio": round(median / predicted_ms, 3) if predicted_ms else None,
        "bound": heads[0].bound if heads else ("launch" if predicted is not None else None),
        "engine": heads[0].engine if heads else None,
        "channels": list(main.channels) if main and main.channels else None,
    }


def totals(rows: list[dict], raw: dict, prediction: Prediction | None) -> Totals:
    runs = raw.get("run_ms") or []
    layer_sum_per_frame = [sum(n["times_ms"][i] for n in raw.get("nodes", []) if i < len(n["times_ms"])) for i in range(len(runs))]
    between = statistics.median([max(r - s, 0.0) for r, s in zip(runs, layer_sum_per_frame, strict=True)]) if runs else 0.0
    measured = sum(r["measured_ms"] for r in rows) + between
    plain = raw.get("unprofiled_ms") or []
    wall = raw.get("profiled_wall_ms") or []
    overhead = statistics.median(wall) - statistics.median(plain) if plain and wall else None
    return Totals(
        round(measured, 4),
        round(prediction.total_ms, 4) if prediction is not None else None,
        round(statistics.median(runs), 4) if runs else 0.0,
        round(percentile(runs, 0.9), 4) if runs else 0.0,
        round(between, 4),
        round(statistics.median(plain), 4) if plain else None,
        round(overhead, 4) if overhead is not None else None,
        round(prediction.plain_ms, 4) if prediction is not None and prediction.plain_ms is not None else None,
    )


def spearman(a: list[float], b: list[float]) -> float:
    """Spearman's rank correlation (average ranks for ties)."""
    if len(a) < 2:
        return 1.0
    ra, rb = _ranks(a), _ranks(b)
    ma, mb = statistics.fmean(ra), statistics.fmean(rb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb, strict=True))
    var = (sum((x - ma) ** 2 for x in ra) * sum((y - mb) ** 2 for y in rb)) ** 0.5
    return cov / var if var else 1.0


def _ranks(values: list[float]) -> list[float]:
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def top_names(rows: list[dict], key: str, count: int = 5) -> set[str]:
    """The names of the `count` layers longest by `key` ("measured_ms" or "predicted_ms"), among the layers that have
    both times."""
    with_both = [r for r in rows if r.get("predicted_ms") is not None and r.get("measured_ms") is not None]
    return {r["name"] for r in sorted(with_both, key=lambda r: -r[key])[:count]}


def top_overlap(rows: list[dict], count: int = 5) -> int:
    """How many of the measured top `count` layers are in the predicted top `count`."""
    return len(top_names(rows, "measured_ms", count) & top_names(rows, "predicted_ms", count))


def _count(shape) -> int:
    total = 1
    for d in shape:
        total *= d
    return total if shape else 0
