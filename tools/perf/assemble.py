"""The profile report assembled from the device's raw profile, the prepared model and the prediction; and the
prediction report of `sdk predict` (the same layer fields, without the measured ones)."""

from __future__ import annotations

import json
import platform as host_platform
from pathlib import Path

from sdk.profiling import OPTIMIZED_FILE, RAW_FILE
from tools.perf.analysis import layer_rows, spearman, top_overlap, totals
from tools.perf.bottlenecks import bottlenecks, resolution_share
from tools.perf.layers import load_layers
from tools.perf.report import PROFILE_FORMAT


def _precision(pipeline, backend: str) -> str:
    wanted = pipeline.spec.model.precision
    if backend == "onnxruntime":
        return "int8" if wanted == "int8" else "fp32"
    return wanted if wanted in ("int8", "fp16", "fp32") else "fp16"


def assemble(pipeline, artifacts, raw_dir: Path, target: str, facts: dict, wall_s: float) -> dict:
    from tools.perf.mapping import attach_unmapped, map_executed, read_optimized

    raw = json.loads((Path(raw_dir) / RAW_FILE).read_text())
    backend = raw["backend"]
    precision = _precision(pipeline, backend)
    notes: list[str] = []
    placement = None
    host = None
    if backend == "onnxruntime":
        model = load_layers(artifacts.model_for(pipeline.spec.model.precision))
        measured = attach_unmapped(map_executed(model, read_optimized(Path(raw_dir) / OPTIMIZED_FILE)), [n["name"] for n in raw["nodes"]])
        if facts.get("platform") == "host":
            from tools.perf.targets import host_profile_prediction

            prediction, cached, peaks, speed = host_profile_prediction(model, pipeline, raw.get("reference"))
            section = _host_section(peaks, speed)
            host = host_speed_section(prediction, cached, speed)
        else:
            prediction, section = None, {"platform": None}
            notes.append("ONNX Runtime on a device's CPU: the performance model has no figures for that CPU; measured only")
    else:
        from tools.perf.targets import device_prediction
        from tools.perf.trt_mapping import map_tensorrt

        model = load_layers(artifacts.model_path)
        dla = pipeline.spec.model.dla is not None and raw.get("dla_core") is not None
        prediction, target_machine, placement = device_prediction(model, pipeline, facts["platform"], precision, dla, facts.get("tensorrt"),
                                                                  _mode(facts, facts["platform"]))  # fmt: skip
        measured = map_tensorrt(model, raw["nodes"], placement)
        section = _device_section(target_machine)
    times = {n["name"]: n["times_ms"] for n in raw["nodes"]}
    rows = layer_rows(model, measured, times, prediction, precision)
    total = totals(rows, raw, prediction)
    report = _base(pipeline, target, raw, precision, section, prediction, rows)
    if host is not None:
        report["host"] = host
    report["total"] = {**total.__dict__, "error": round(total.predicted_ms / total.measured_ms - 1, 4) if total.predicted_ms else None,
                       "plain_error": round(total.predicted_plain_ms / total.unprofiled_median_ms - 1, 4)
                       if total.predicted_plain_ms and total.unprofiled_median_ms else None}  # fmt: skip
    both = [r for r in rows if r.get("predicted_ms") is not None]
    report["accuracy"] = {
        "spearman": round(spearman([r["predicted_ms"] for r in both], [r["measured_ms"] for r in both]), 4) if both else None,
        "top5_overlap": top_overlap(rows) if both else None,
        "layers_compared": len(both),
    }
    fallbacks = {v.name: v.reason for v in placement.layers if v.device == "GPU"} if placement is not None else {}
    report["bottlenecks"] = bottlenecks(rows, precision, 5, fallbacks, _sparse_names(model, prediction))
    report["resolution"] = resolution_share(rows, next(iter(model.inputs.values()), None))
    report["stages"] = stage_shares(pipeline, target)
    if report["stages"]:
        shares = ", ".join(f"{k} {v:.0%}" for k, v in report["stages"]["shares"].items())
        notes.append(f"the pipeline's stages at p50 (from {report['stages']['from']}): {shares}")
    else:
        notes.append(f"no measured run of {pipeline.spec.name} on {target} yet: deploy or validate it to see preprocessing and "
                     "postprocessing against inference")  # fmt: skip
    report["notes"] = notes + (prediction.notes if prediction else [])
    report["run"] = {"wall_s": round(wall_s, 3), "host": host_platform.node(), "device_runtime": raw.get("runtime"), "release": raw.get("release")}
    return report


def _base(pipeline, target: str, raw: dict, precision: str, section: dict, prediction, rows: list[dict]) -> dict:
    return {
        "format": PROFILE_FORMAT,
        "kind": "profile",
        "pipeline": pipeline.spec.name,
        "target": target,
        "backend": raw["backend"],
        "runtime": raw.get("runtime", ""),
        "precision": precision,
        "frames": raw["frames"],
        "warmup": raw.get("warmup"),
        "threads": raw.get("threads"),
        "prediction": {
            **section,
            "backend": prediction.backend if prediction else None,
            "transitions": [t.__dict__ for t in prediction.transitions] if prediction else [],
        },  # fmt: skip
        "layers": rows,
    }


def _mode(facts: dict, platform: str) -> str | None:
    """The device's reported nvpmodel mode as the platform facts name it (None: not one of them, the boot mode)."""
    from tools.perf.platforms import resolve_mode

    return resolve_mode(platform, facts.get("power_mode"))


def _host_section(peaks, speed=None) -> dict:
    """The cached peaks; the roofline drawn at this run's (the layers beneath it were measured in this run)."""
    ran = speed.scale(peaks) if speed is not None else peaks
    return {"platform": "host", "peaks": peaks.as_dict(), "roofline": {"peak_gflops": ran.conv_gflops, "bandwidth_gbs": ran.cache_gbs}}


def host_speed_section(prediction, cached, speed) -> dict:
    """The report's `host`: the machine's speed during the profile against its cached peaks, and what it did to the
    prediction (tools/perf/host_speed.py)."""
    if speed is None:
        return {"speed_factor": None, "applied": False, "factors": None, "probes": None, "predicted_cached_ms": round(cached.total_ms, 4),
                "text": "no reference probes ran with this profile: the prediction uses the cached peaks as they are"}  # fmt: skip
    factor = cached.total_ms / prediction.total_ms if prediction.total_ms else 1.0
    probes = ", ".join(f"{name} {value:.2f}" for name, value in speed.factors.items())
    text = (f"{factor:.2f}x the cached peaks' speed for this model, from reference probes between the frames (each probe "
            f"now against cached: {probes}); the prediction uses this run's speeds (the cached peaks alone: {cached.total_ms:.2f} ms)")  # fmt: skip
    if speed.contention is not None:
        c = speed.contention
        text += f"; kernels longer than {c.short_ms:.1f} ms stretched by other work, up to {c.slowdown:.2f}x from {c.span_ms:.1f} ms"
    if speed.missing:
        text += f"; not measured, kept as cached: {', '.join(speed.missing)}"
    return {"speed_factor": round(factor, 4), "applied": True, **speed.as_dict(), "predicted_cached_ms": round(cached.total_ms, 4), "text": text}


def _device_section(machine) -> dict:
    return {
        "platform": machine.platform,
        "power_mode": machine.power_mode,
        "sources": machine.source_titles(),
        "roofline": {"peak_gflops": machine.gpu.dense_tops["fp16"] * 1e3, "bandwidth_gbs": machine.gpu.memory_gbs},
    }


def _sparse_names(model, prediction) -> set[str]:
    from tools.perf.engines import sparse_candidate

    if prediction is None or prediction.backend != "tensorrt":
        return set()
    engines = {m: (p.engine, p.precision) for p in prediction.layers for m in p.members}
    return {layer.name for layer in model.layers if sparse_candidate(layer, *engines.get(layer.name, ("gpu", prediction.precision)))}


def stage_shares(pipeline, target: str) -> dict | None:
    """Preprocessing and postprocessing against inference, from the newest measured run of this pipeline on this target
    (reports/<pipeline>/latest/report.json), when there is one."""
    from tools.reports.report_dirs import REPORTS, _slug

    folders = sorted((REPORTS / _slug(pipeline.spec.name)).glob(f"*-{_slug(target)}-*"), reverse=True)
    for folder in folders:
        if folder.name.split("-")[-1] not in ("deploy", "validate") or not (folder / "report.json").is_file():
            continue
        try:
            found = json.loads((folder / "report.json").read_text())
        except ValueError:
            continue
        stages = {name: (s or {}).get("p50_ms") for name, s in (found.get("stages") or {}).items()}
        total = sum(v for v in stages.values() if v)
        if not total:
            continue
        return {"from": str(folder), "p50_ms": stages, "shares": {k: round(v / total, 4) for k, v in stages.items() if v}}
    return None


def prediction_report(pipeline, model, prediction, host=None, machine=None, placement=None, power=None) -> dict:
    """`sdk predict`'s JSON: each predicted layer group and the whole model."""
    layers = [
        {"name": " + ".join(p.members), "op": p.op, "op_class": p.op_class, "engine": p.engine, "precision": p.precision, "flops": p.flops,
         "bytes": p.bytes, "intensity": round(p.flops / p.bytes, 3) if p.bytes else 0.0, "predicted_ms": round(p.ms, 4),
         "compute_ms": round(p.compute_ms, 4), "memory_ms": round(p.memory_ms, 4), "launch_ms": round(p.launch_ms, 4), "bound": p.bound,
         "fusion": p.fusion or (f"fused into {p.head}: one kernel" if len(p.members) > 1 else "")}
        for p in prediction.layers
    ]  # fmt: skip
    rows = [{**row, "fused": list(p.members), "channels": None, "measured_ms": None} for row, p in zip(layers, prediction.layers, strict=True)]
    by_name = model.by_name()
    for row, p in zip(rows, prediction.layers, strict=True):
        main = by_name[p.head]
        row["channels"] = list(main.channels) if main.channels else None
    fallbacks = {v.name: v.reason for v in placement.layers if v.device == "GPU"} if placement is not None else {}
    return {
        "format": PROFILE_FORMAT,
        "kind": "prediction",
        "pipeline": pipeline.spec.name if pipeline is not None else Path(model.path).name,
        "platform": prediction.platform,
        "backend": prediction.backend,
        "precision": prediction.precision,
        "power_mode": machine.power_mode if machine else None,
        "power": power,
        "peaks": host.as_dict() if host else None,
        "sources": machine.source_titles() if machine else None,
        "total": {"predicted_ms": round(prediction.total_ms, 4), "layers_ms": round(sum(p.ms for p in prediction.layers), 4),
                  "transitions_ms": round(sum(t.ms for t in prediction.transitions), 4), "run_overhead_ms": round(prediction.run_overhead_ms, 4),
                  "plain_ms": round(prediction.plain_ms, 4) if prediction.plain_ms is not None else None},
        "layers": layers,
        "transitions": [t.__dict__ for t in prediction.transitions],
        "bottlenecks": bottlenecks(rows, prediction.precision, 5, fallbacks, _sparse_names(model, prediction), key="predicted_ms"),
        "fusions": fusion_counts(model, prediction),
        "notes": prediction.notes,
    }  # fmt: skip


def fusion_counts(model, prediction) -> dict[str, int]:
    """How many layers each of TensorRT's fusions took (the per-layer `fusion` says which): activations and pointwise
    layers run in a convolution's kernel, concatenations written in place, shuffles that are views, folded Q/DQ."""
    if prediction.backend != "tensorrt":
        return {}
    by_name = model.by_name()
    heads = {"conv", "conv_pointwise", "conv_depthwise", "conv_transpose", "gemm"}
    counts = {"into_convolutions": 0, "concat_in_place": 0, "views": 0, "qdq_folded": 0}
    for p in prediction.layers:
        if by_name[p.head].op_class in heads:
            counts["into_convolutions"] += sum(1 for m in p.members[1:] if by_name[m].op_class == "elementwise")
        key = {"in place": "concat_in_place", "a view": "views", "folded": "qdq_folded"}.get(p.fusion.split(":")[0])
        if key:
            counts[key] += 1
    return counts
