"""A prediction for where the model will run: this host (its peaks measured once and cached) or a module of the
platform facts (its GPU, or its DLA where the placement prediction puts each layer)."""

from __future__ import annotations

from pathlib import Path

from sdk.errors import ConfigError


def host_prediction(model, pipeline):
    """`--platform host`: this CPU's peaks for the pipeline's threads and spinning (measured once, cached)."""
    from tools.perf.host_peaks import host_peaks
    from tools.perf.predict import predict_host
    from tools.state import shared_cache_dir

    spec = pipeline.spec.model
    peaks = host_peaks(spec.threads, spec.spinning, shared_cache_dir())
    return predict_host(model, peaks), peaks


def host_profile_prediction(model, pipeline, reference: dict | None):
    """`sdk profile --target local`: the host prediction scaled by the machine's speed during the profile (the
    reference probes run between its frames, tools/perf/host_speed.py) -> (prediction, the cached peaks' prediction,
    the cached peaks, the speed or None). Without a reference the prediction is the cached peaks' own."""
    from tools.perf.host_speed import host_speed
    from tools.perf.predict import predict_host

    cached, peaks = host_prediction(model, pipeline)
    speed = host_speed(peaks, reference)
    if speed is None:
        return cached, cached, peaks, None
    return predict_host(model, speed.scale(peaks), contention=speed.contention), cached, peaks, speed


def device_prediction(model, pipeline, platform: str, precision: str, dla: bool, tensorrt: str | None = None, power_mode: str | None = None):
    """A module's prediction (TensorRT on its GPU, or on DLA where the placement prediction puts each layer)."""
    from tools.perf.platforms import machine
    from tools.perf.predict import predict_device

    target = machine(platform, power_mode)
    placement = None
    if dla:
        from sdk.engine.platforms import TensorRTVersion, dla_availability
        from tools.dla.analysis import analyse
        from tools.dla.graph import load_graph
        from tools.perf.platforms import platform_facts

        version = TensorRTVersion.parse(tensorrt or "10.3")
        family = platform_facts()["platforms"][target.platform]["family"]
        availability = dla_availability(family, version, target.dla.cores if target.dla else 0)
        if not availability.available:
            raise ConfigError(f"--dla: {availability.reason}", hint="predict for the GPU (leave out --dla), or a platform with DLA cores")
        placement = analyse(load_graph(Path(model.path)), model.path, target.platform, version, availability, precision)
    core = pipeline.spec.model.dla.core if dla and pipeline is not None and pipeline.spec.model.dla is not None else 0
    return predict_device(model, target, precision, placement, dla_core=core), target, placement


def power_comparison(model, target, precision: str, placement, dla_core: int, given: bool) -> dict:
    """Which power mode a prediction is at and what another mode gives: the mode the module boots in against its
    fastest (MAXN), or a mode given by hand against the boot mode. -> the report's `power` (with its one-line text)."""
    from tools.perf.platforms import fastest_mode, machine
    from tools.perf.predict import predict_device

    other = target.boot_mode if target.power_mode != target.boot_mode else fastest_mode(target.platform)
    other_ms = None
    if other != target.power_mode:
        other_ms = predict_device(model, machine(target.platform, other), precision, placement, dla_core=dla_core).total_ms
    if target.at_boot_mode:
        text = f"predicted at {target.power_mode}, the mode this module boots in"
        text += f" ({target.boot_note})" if target.boot_note else ""
    else:
        text = f"predicted at {target.power_mode}{' (--power-mode)' if given else ''}; the module boots in {target.boot_mode}"
    if other_ms is not None:
        text += f"; {other}: {other_ms:.3f} ms"
    return {"power_mode": target.power_mode, "boot_mode": target.boot_mode, "at_boot_mode": target.at_boot_mode,
            "boot_confirmed": not target.boot_note, "compared_mode": other if other_ms is not None else None,
            "compared_ms": round(other_ms, 4) if other_ms is not None else None, "text": text}  # fmt: skip
