"""ONNX Runtime's profiler trace (Chrome trace events) read into runs and per-node kernel times: one reader for the
model's profile (onnxruntime_profile.py) and the reference probes between its frames (reference.py)."""

from __future__ import annotations

KERNEL_SUFFIX = "_kernel_time"


def parse_trace(events: list[dict], warmup: int = 0) -> tuple[list[float], list[dict]]:
    """ONNX Runtime's trace (Chrome trace events) -> (each kept run's time in ms, the nodes in execution order with their
    kernel time in each kept run). A node's event belongs to the run whose span holds its start; the first `warmup`
    runs are dropped."""
    runs = sorted((e for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"), key=lambda e: e["ts"])
    kept = runs[warmup:]
    spans = [(e["ts"], e["ts"] + e["dur"]) for e in kept]
    nodes: dict[str, dict] = {}
    for event in events:
        name = event.get("name", "")
        if event.get("cat") != "Node" or not name.endswith(KERNEL_SUFFIX):
            continue
        run = next((i for i, (start, end) in enumerate(spans) if start <= event["ts"] <= end), None)
        if run is None:
            continue
        args = event.get("args", {})
        node = nodes.setdefault(
            name[: -len(KERNEL_SUFFIX)],
            {
                "name": name[: -len(KERNEL_SUFFIX)],
                "op": args.get("op_name", ""),
                "provider": args.get("provider", ""),
                "input_shapes": [_shape(t) for t in args.get("input_type_shape", [])],
                "output_shapes": [_shape(t) for t in args.get("output_type_shape", [])],
                "times_ms": [0.0] * len(kept),
                "order": event["ts"] - spans[run][0],
            },
        )
        node["times_ms"][run] += event["dur"] / 1e3
    ordered = sorted(nodes.values(), key=lambda n: n.pop("order"))
    for node in ordered:
        node["times_ms"] = [round(v, 4) for v in node["times_ms"]]
    return [round(e["dur"] / 1e3, 4) for e in kept], ordered


def _shape(entry: dict) -> list[int]:
    """{"float": [1, 3, 300, 300]} -> [1, 3, 300, 300]."""
    return list(next(iter(entry.values()), [])) if isinstance(entry, dict) else []


__all__ = ["KERNEL_SUFFIX", "parse_trace"]
