"""TensorRT's per-layer times on the device: an `IProfiler` on the engine's execution context and the engine inspector.

The engine runs first without the profiler (`unprofiled_ms`: the engine's CUDA-event time per frame), then with it:
TensorRT calls `IProfiler.report_layer_time(layer_name, ms)` once for every layer of every execution, in execution
order, so each frame's share of the log is the calls made during that frame's infer(). A DLA subgraph is one layer
to TensorRT: its loadable reports as a single "{ForeignNode[first...last]}" whose inside only the host can name
(tools/perf/trt_mapping.py, from the DLA placement). The inspector's JSON (`ICudaEngine.create_engine_inspector`,
`IEngineInspector.get_engine_information(LayerInformationFormat.JSON)`, complete since engines are built with
ProfilingVerbosity.DETAILED: sdk/engine/trt_adapter.py) gives each layer's type, precision and tactic.
"""

from __future__ import annotations

from pathlib import Path

from sdk.profiling import RAW_FORMAT


def split_frames(log: list[tuple[str, float]], marks: list[int]) -> list[dict]:
    """The profiler's log cut at each frame's first call -> nodes in execution order, each with its time per frame."""
    nodes: dict[str, dict] = {}
    frames = len(marks)
    bounds = [*marks, len(log)]
    for frame in range(frames):
        for name, ms in log[bounds[frame] : bounds[frame + 1]]:
            node = nodes.setdefault(name, {"name": name, "op": "", "times_ms": [0.0] * frames})
            node["times_ms"][frame] += ms
    for node in nodes.values():
        node["times_ms"] = [round(v, 5) for v in node["times_ms"]]
    return list(nodes.values())


def profile_tensorrt(
    engine_path: Path, *, frames: int = 50, warmup: int = 5, dla_core: int | None = None, batch: int = 1, declared: tuple = ()
) -> dict:
    """Profile the engine; returns the raw profile (`layer_information`: the inspector's JSON)."""
    import tensorrt as trt

    from sdk.backends.tensorrt_gpu import TensorRTBackend

    backend = TensorRTBackend(engine_path, declared=declared, dla_core=dla_core, batch=batch)
    with backend:
        for _ in range(warmup):
            backend.infer()
        plain = []
        for _ in range(frames):
            backend.infer()
            plain.append(backend.last_infer_ms)
        log: list[tuple[str, float]] = []
        backend.log_layers(log)
        for _ in range(warmup):
            backend.infer()
        log.clear()
        marks, runs = [], []
        for _ in range(frames):
            marks.append(len(log))
            backend.infer()
            runs.append(backend.last_infer_ms)
        information = backend.layer_information()
    types = {layer.get("Name"): layer.get("LayerType", "") for layer in information.get("Layers", []) if isinstance(layer, dict)}
    nodes = split_frames(log, marks)
    for node in nodes:
        node["op"] = types.get(node["name"], "")
    return {
        "format": RAW_FORMAT,
        "backend": "tensorrt",
        "runtime": f"tensorrt {trt.__version__}",
        "model": Path(engine_path).name,
        "dla_core": dla_core,
        "batch": batch,
        "warmup": warmup,
        "frames": frames,
        "unprofiled_ms": [round(v, 5) for v in plain],
        "profiled_wall_ms": [round(v, 5) for v in runs],
        "run_ms": [round(v, 5) for v in runs],
        "nodes": nodes,
        "layer_information": information,
    }
