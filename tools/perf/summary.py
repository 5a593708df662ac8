"""What a deploy whose latency budget failed shows: the three layers that take most of the time.

Measured where the run measured them (TensorRT's profiler with `model.profile_layers`: the report's `slowest_layers`),
else predicted by the performance model for the target (this machine's peaks for `local` and for a `linux-generic`
target such as the sim, the module's facts for a vehicle), named as a prediction, with the command that measures them (`sdk profile`)."""

from __future__ import annotations

from sdk.runtime.verdict import check_unit


def latency_failed(report: dict) -> bool:
    return report.get("verdict") == "FAIL" and any(c["status"] == "FAIL" and check_unit(c["name"]) == "ms" for c in report.get("checks", []))


def top_layers(report: dict, pipeline, target, count: int = 3) -> tuple[list[tuple[str, float]], str]:
    """([(layer, ms per frame)], where the numbers come from)."""
    measured = report.get("slowest_layers") or []
    if measured:
        return [(name, float(ms)) for name, ms in measured[:count]], "measured by TensorRT's profiler"
    from tools.models.prepare import PrepareModel
    from tools.perf.layers import load_layers
    from tools.state import cache_dir
    from tools.targets import LocalTarget

    model = load_layers(PrepareModel(pipeline, cache_dir())().model_path)
    generic = getattr(getattr(target, "spec", None), "platform", None) == "linux-generic"
    if isinstance(target, LocalTarget) or generic:  # a linux-generic target (the sim) is a CPU the host's peaks stand for
        from tools.perf.targets import host_prediction

        prediction, _ = host_prediction(model, pipeline)
        where = "predicted for this machine"
        if generic:
            here = target.spec.host in ("127.0.0.1", "localhost", "::1")
            where = f"predicted for this machine, which {'runs' if here else 'stands for'} the linux-generic target {target.name}"
    else:
        from tools.perf.targets import device_prediction

        precision = {"int8": "int8", "fp16": "fp16"}.get(pipeline.spec.model.precision, "fp16")
        prediction, machine, _ = device_prediction(model, pipeline, target.spec.platform, precision, False)
        where = f"predicted for {machine.name}"
    ranked = sorted(prediction.layers, key=lambda p: -p.ms)[:count]
    return [(" + ".join(p.members), p.ms) for p in ranked], where


def render_top_layers(console, result, target) -> None:
    """After a deploy's summary: when a latency budget failed, the top three layers and how to measure them."""
    from tools.perf.report import short_name

    if not latency_failed(result.report):
        return
    try:
        layers, where = top_layers(result.report, result.pipeline, target)
    except Exception as exc:  # the summary must not fail for its hint
        console.print(f"  (the layers taking the time could not be predicted: {exc})", highlight=False, markup=False)
        return
    console.print(f"latency budget failed; the layers taking the most time ({where}):", highlight=False)
    names = [name for name, _ in layers]
    for number, (name, ms) in enumerate(layers, 1):
        console.print(f"  {number}. {short_name(name, 70, names)}: {ms:.3f} ms", highlight=False, markup=False)
    console.print(f"  measure every layer: sdk profile {result.pipeline.path} --target {result.report.get('target')}", highlight=False, markup=False)
