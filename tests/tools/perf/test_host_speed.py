"""The host's speed during a profile against its cached peaks (tools/perf/host_speed.py), on synthetic probe timings:
each probe's median over the frames replaces the cached value it measures, the GEMM, DRAM and the cache probe follow
their probes, a probe that did not run keeps the cached value, long kernels are stretched as the long probe says, and
the cached-peaks prediction (`sdk predict --platform host`) is untouched."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest

from sdk.profiling.reference import REFERENCE_FILE
from tests.conftest import EXAMPLE
from tests.tools.perf.peaks import FIXED
from tools.perf.host_peaks import LONG_CHAIN, peaks_path, store_peaks
from tools.perf.host_runs import WAKE_KERNELS
from tools.perf.host_speed import LONG, PROBES, WAKE_PROBE, Contention, contention, host_speed, write_reference
from tools.perf.layers import load_layers
from tools.perf.predict import predict_host

WORK = {"conv": 2.0e8, "pointwise": 4.0e8, "depthwise": 1.5e7, "narrow": 1.3e7, "vector": 2.0e6, "lrn": 2.5e5, "llc": 32 << 20,
        "chain": 32, "nodes": 32, "parallel": 16, LONG: LONG_CHAIN * 2.0e8}  # fmt: skip


def _runs(value: float) -> list[float]:
    """Five runs whose median is `value`, one of them a load spike fifty times as long."""
    return [value * 0.9, value, value, value * 1.1, value * 50]


def reference(peaks, speed: dict[str, float] | None = None, long_ms: float | None = None) -> dict:
    """A raw reference as sdk/profiling/reference.py writes it, each probe `speed[probe]` times as fast as `peaks`."""
    speed = speed or {}
    probes = {}
    for name, (fields, unit) in PROBES.items():
        s = speed.get(name, 1.0)
        if unit == "ms/node":
            launch, gap = (getattr(peaks, f) for f in fields)
            kernel, between = launch * WORK[name] / s, gap * WORK[name] / s
        else:
            kernel, between = WORK[name] / (getattr(peaks, fields[0]) * s * 1e6), 0.01
        probes[name] = {"work": WORK[name], "unit": "x", "burst": 3, "kernel_ms": _runs(kernel), "between_ms": _runs(between)}
    if long_ms is not None:
        probes[LONG] = {"work": WORK[LONG], "unit": "flop", "burst": 2, "kernel_ms": _runs(long_ms), "between_ms": _runs(0.01)}
    return {"format": 1, "probes": probes}


def test_each_probe_median_replaces_its_cached_value():
    speed = host_speed(FIXED, reference(FIXED, {"conv": 0.5, "chain": 0.5, "nodes": 2.0}))
    assert speed.factors["conv"] == pytest.approx(0.5) and speed.factors["chain"] == pytest.approx(0.5)
    assert speed.factors["nodes"] == pytest.approx(2.0) and speed.factors["pointwise"] == pytest.approx(1.0)
    ran = speed.scale(FIXED)
    assert ran.conv_gflops == pytest.approx(FIXED.conv_gflops / 2)  # the load spike in one run of five does not count
    assert ran.launch_ms == pytest.approx(2 * FIXED.launch_ms) and ran.gap_ms == pytest.approx(2 * FIXED.gap_ms)
    assert ran.node_ms == pytest.approx(FIXED.node_ms / 2) and ran.node_gap_ms == pytest.approx(FIXED.node_gap_ms / 2)
    assert ran.cache_gbs == pytest.approx(2 * FIXED.cache_gbs)  # the cache probe follows the hot chain (decision 1200)
    assert "cache" not in speed.factors  # not run between the frames: alone, it measured a session's start
    assert ran.pointwise_gflops == pytest.approx(FIXED.pointwise_gflops) and ran.dram_gbs == pytest.approx(FIXED.dram_gbs)
    assert speed.probes["conv"] == {"unit": "GFLOP/s", "cached": FIXED.conv_gflops, "measured": pytest.approx(FIXED.conv_gflops / 2),
                                    "factor": 0.5, "runs": 5}  # fmt: skip
    assert not speed.missing and speed.contention is None  # no long probe ran


def test_the_gemm_dram_pooling_and_resizes_follow_their_probes():
    ran = host_speed(FIXED, reference(FIXED, {"pointwise": 2.0, "llc": 0.25, "vector": 0.5, "chain": 0.8})).scale(FIXED)
    assert ran.resize_gelems == pytest.approx(0.8 * FIXED.resize_gelems) and ran.resize2x_gelems == pytest.approx(0.8 * FIXED.resize2x_gelems)
    assert ran.plain_node_ms == pytest.approx(FIXED.plain_node_ms / 0.8) and ran.plain_parallel_ms == FIXED.plain_parallel_ms  # a time, divided
    assert ran.gemm_gflops == pytest.approx(2 * FIXED.gemm_gflops) and ran.dram_gbs == pytest.approx(FIXED.dram_gbs / 4)
    assert ran.llc_gbs == pytest.approx(FIXED.llc_gbs / 4)
    assert ran.pool_gflops == pytest.approx(FIXED.pool_gflops / 2) and ran.vector_gflops == pytest.approx(FIXED.vector_gflops / 2)


def test_a_probe_that_did_not_run_keeps_the_cached_value():
    raw = reference(FIXED, dict.fromkeys(PROBES, 0.5))
    del raw["probes"]["lrn"]
    raw["probes"]["vector"]["kernel_ms"] = raw["probes"]["vector"]["kernel_ms"][:2]  # too few runs to trust
    speed = host_speed(FIXED, raw)
    assert set(speed.missing) == {"lrn", "vector"} and "lrn" not in speed.factors
    ran = speed.scale(FIXED)
    assert ran.lrn_gflops == FIXED.lrn_gflops and ran.vector_gflops == FIXED.vector_gflops
    assert ran.conv_gflops == pytest.approx(FIXED.conv_gflops / 2)
    assert host_speed(FIXED, None) is None and host_speed(FIXED, {"format": 1, "probes": {}}) is None


def test_the_profile_measures_its_own_wake_from_the_parallel_probes_cold_runs():
    raw = reference(FIXED)
    assert host_speed(FIXED, raw).wake is None  # an SDK on the device that did not measure it: the cached wake stays
    assert host_speed(FIXED, raw).scale(FIXED).wake_ms == FIXED.wake_ms
    raw["probes"][WAKE_PROBE] |= {"first_ms": _runs(0.03) * 2, "cold_first_ms": _runs(0.05)}  # two kept runs a burst, one cold
    speed = host_speed(replace(FIXED, wake_ms=0.09), raw)
    assert speed.wake == {"cached_ms": 0.09, "measured_ms": pytest.approx(0.02), "runs": 5}
    assert speed.scale(FIXED).wake_ms == pytest.approx(0.02)  # replaces the cached wake
    assert speed.as_dict()["wake"] == speed.wake
    raw["probes"][WAKE_PROBE]["cold_first_ms"] = [0.01] * 5  # the cold runs quicker than the kept: nothing, not less
    assert host_speed(FIXED, raw).scale(FIXED).wake_ms == 0.0
    raw["probes"][WAKE_PROBE]["cold_first_ms"] = [0.05] * 2  # too few bursts to trust
    assert host_speed(FIXED, raw).wake is None


def test_the_reference_lists_the_wake_probes_first_layer(tmp_path):
    listed = {p["name"]: p for p in json.loads((write_reference(tmp_path) / REFERENCE_FILE).read_text())["probes"]}
    assert listed[WAKE_PROBE]["first"] == WAKE_KERNELS
    assert [name for name, p in listed.items() if "first" in p] == [WAKE_PROBE]


def test_long_kernels_are_stretched_as_the_long_probe_says():
    short = WORK["conv"] / (FIXED.conv_gflops * 1e6)
    speed = host_speed(FIXED, reference(FIXED, long_ms=LONG_CHAIN * short * 1.5))
    found = speed.contention
    assert found.short_ms == pytest.approx(short) and found.span_ms == pytest.approx(LONG_CHAIN * short)
    assert found.slowdown == pytest.approx(1.5)
    c = Contention(short_ms=2.0, long_ms=2.0 * LONG_CHAIN * 2)  # twice as long as undisturbed
    assert c.factor(0.5) == c.factor(2.0) == 1.0 and c.factor(c.span_ms) == pytest.approx(2.0) and c.factor(1000) == pytest.approx(2.0)
    middle = 2.0 * math.sqrt(LONG_CHAIN)  # halfway in log time
    assert c.factor(middle) == pytest.approx(1.5)
    assert all(c.factor(a) <= c.factor(b) for a, b in zip([1, 2, 4, 8, 16, 32], [2, 4, 8, 16, 32, 64], strict=True))
    assert contention({"conv": {"kernel_ms": [1.0] * 5}}) is None  # no long probe: nothing stretched


def test_contention_stretches_long_layers_only(example_layers):
    plain = predict_host(example_layers, FIXED, block=16)
    c = Contention(short_ms=0.3, long_ms=0.3 * LONG_CHAIN * 1.5)
    stretched = predict_host(example_layers, FIXED, block=16, contention=c)
    for before, after in zip(plain.layers, stretched.layers, strict=True):
        core = before.ms - before.reorder_ms
        assert after.ms - after.reorder_ms == pytest.approx(core * c.factor(core))
        assert sum(after.shares) == pytest.approx(after.ms)
    assert stretched.total_ms > plain.total_ms and stretched.run_overhead_ms == plain.run_overhead_ms


def test_the_profile_prediction_is_scaled_and_the_cached_one_is_not(example_layers, monkeypatch):
    from sdk.spec import load_pipeline
    from tools.perf.targets import host_prediction, host_profile_prediction
    from tools.state import cache_dir

    monkeypatch.delenv("SDK_SHARED_CACHE", raising=False)  # this state's own cache, holding the fixed peaks
    path, key = peaks_path(2, False, cache_dir())  # pipelines/pedestrian.yaml: 2 threads, spinning off
    store_peaks(FIXED, key, path)
    pipeline = load_pipeline(EXAMPLE)
    slower = reference(FIXED, dict.fromkeys(PROBES, 0.5))
    prediction, cached, peaks, speed = host_profile_prediction(example_layers, pipeline, slower)
    assert peaks == FIXED and speed.factors == dict.fromkeys(PROBES, 0.5)
    assert cached.total_ms == pytest.approx(predict_host(example_layers, FIXED).total_ms)
    assert prediction.total_ms == pytest.approx(predict_host(example_layers, speed.scale(FIXED)).total_ms)
    # every speed halved: every term of the roofline doubles, but for the few nodes whose work crosses WOKEN_MS
    assert prediction.total_ms == pytest.approx(2 * cached.total_ms, rel=0.01)
    assert host_prediction(example_layers, pipeline)[0].total_ms == pytest.approx(cached.total_ms)  # `sdk predict`, the deploy summary
    same, cached_again, _, none = host_profile_prediction(example_layers, pipeline, None)
    assert none is None and same.total_ms == pytest.approx(cached_again.total_ms)


@pytest.fixture(scope="module")
def example_layers(prepared_example):
    return load_layers(prepared_example.model_path)
