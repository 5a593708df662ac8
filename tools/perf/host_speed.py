"""The host's speed at the moment of a profile, against its cached peaks: what `sdk profile --target local` scales
its `--platform host` prediction by.

The cached peaks (tools/perf/host_peaks.py) were measured once, at some moment, each probe at its own; on a shared
machine a two-thread kernel gets one core or two depending on the moment, and a profile minutes later meets another
machine. So the profile runs the same probes between its frames, in the same process with the same threads and
spinning (sdk/profiling/reference.py), a short burst each after every frame, and each probe's median over the
profile's frames replaces the cached value it measures: the prediction is then made from the same frames, and the same
statistic (medians over frames), as the measured layers it is compared with (decision 0706). Two probes are too long
to repeat between frames: the GEMM follows the pointwise convolution (the same kernel, and the host model takes the
faster of the two), the pass over DRAM follows the pass the size of the last-level cache (the factor of one applied to
the other), the pooling and swish probes follow the vector probe (each a pass of arithmetic over a tensor in the
cache), the big hot chain follows the hot chain (decision 1260), the resize probes follow the launch chain (all one
thread's scalar work, decision 1262), the plain chains follow the same chains under the profiler (decision 1263). The cache probe
follows the hot chain (decision 1200): one node of about 0.1 ms alone in its session, between frames it measured 0.3-0.8
of its cached rate in all ten profiles of two benchmark runs while the hot chain's 32 nodes over tensors of the same
order measured 0.84-1.09 of theirs; the lone node most likely meets what a session pays to start a run (its threads
waking), which a model's nodes, one after another, do not.

The wake (decision 1255) is measured in the profile's own way too: the parallel probe's first layer in each burst's
cold run, beyond its kept runs (decision 1264). Between a profile's frames the other probes keep the cores busy, which
the cached wake's single thread of arithmetic does not: the profile's wake is the smaller.

Each probe's factor is its speed now over its cached speed (> 1: faster now); `speed_factor` sums them up for the
model: its prediction from the cached peaks over its prediction from this run's. `sdk predict --platform host` has
no run to measure against and keeps the cached peaks.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass, replace
from pathlib import Path

from sdk.profiling.reference import REFERENCE_FILE, REFERENCE_FORMAT
from tools.perf.host_peaks import LONG_CHAIN, HostPeaks, last_level_cache, probe_set, probe_values
from tools.perf.host_runs import WAKE_KERNELS, wake_from

BURST = 3  # runs of each probe after every frame; the first is cold (the model's run evicted it) and is not kept
MIN_RUNS = 3  # a probe with fewer kept runs than this is not used: its fields keep their cached values, said so
# The probes run between the frames, the peaks' fields each measures, and the unit the report shows it in.
PROBES = {
    "conv": (("conv_gflops",), "GFLOP/s"),
    "pointwise": (("pointwise_gflops",), "GFLOP/s"),
    "depthwise": (("depthwise_gflops",), "GFLOP/s"),
    "narrow": (("narrow_gflops",), "GFLOP/s"),
    "vector": (("vector_gflops",), "GFLOP/s"),
    "lrn": (("lrn_gflops",), "GFLOP/s"),
    "llc": (("llc_gbs",), "GB/s"),
    "chain": (("launch_ms", "gap_ms"), "ms/node"),
    "nodes": (("node_ms", "node_gap_ms"), "ms/node"),
    "parallel": (("parallel_launch_ms", "parallel_gap_ms"), "ms/node"),
}
# Fields no probe measures between the frames: scaled by this probe's factor.
FOLLOWS = {
    "gemm_gflops": "pointwise",
    "dram_gbs": "llc",
    "cache_gbs": "nodes",
    "pool_gflops": "vector",
    "swish_gflops": "vector",
    "big_node_ms": "nodes",
    "big_gap_ms": "nodes",
    "dwnarrow_gflops": "depthwise",
    "resize_gelems": "chain",
    "resize2x_gelems": "chain",
    "plain_node_ms": "chain",
    "plain_parallel_ms": "parallel",
}
WORK = {"GFLOP/s": "flop", "GB/s": "byte", "ms/node": "node"}
LONG = "long"  # the conv probe's node LONG_CHAIN times in a row
LONG_BURST = 2  # its runs after every frame (the first not kept): it is the longest probe by far
WAKE_PROBE = "parallel"  # its first layer's kernels in each run, cold and kept: the wake as the profile meets it


@dataclass(frozen=True)
class Contention:
    """How a shared machine stretches long kernels. The conv probe (`short_ms` a run) usually runs between two
    interruptions by other work, so its median is its undisturbed time; LONG_CHAIN of its node in a row (`long_ms` a
    run, `span_ms` = LONG_CHAIN x short_ms undisturbed) usually meets some, so its median is `slowdown` times its
    span. A layer predicted to take T undisturbed is stretched by 1 up to short_ms, by `slowdown` from span_ms on, and
    in between by the interpolation of the two in log T: its median is then the same statistic as the measured one."""

    short_ms: float
    long_ms: float

    @property
    def span_ms(self) -> float:
        return LONG_CHAIN * self.short_ms

    @property
    def slowdown(self) -> float:
        return self.long_ms / self.span_ms

    def factor(self, ms: float) -> float:
        if ms <= self.short_ms:
            return 1.0
        if ms >= self.span_ms:
            return self.slowdown
        return 1.0 + (self.slowdown - 1.0) * math.log(ms / self.short_ms) / math.log(LONG_CHAIN)

    def as_dict(self) -> dict:
        return {"short_ms": round(self.short_ms, 4), "long_ms": round(self.long_ms, 4), "span_ms": round(self.span_ms, 4),
                "slowdown": round(self.slowdown, 4)}  # fmt: skip


@dataclass(frozen=True)
class HostSpeed:
    """What each probe measured between the profile's frames, against the cached peaks."""

    measured: dict[str, float]  # peaks' field -> its value in this run (a probe's median over the frames)
    probes: dict[str, dict]  # probe -> {"unit", "cached", "measured", "factor", "runs"}
    missing: tuple[str, ...] = ()  # probes that did not run (enough): their fields keep the cached values
    contention: Contention | None = None  # None: the long probe did not run (enough); no stretching predicted
    wake: dict | None = None  # {"cached_ms", "measured_ms", "runs"}: the wake as the profile met it (profile_wake)

    @property
    def factors(self) -> dict[str, float]:
        """probe -> its speed now over its cached speed (> 1: faster now)."""
        return {name: p["factor"] for name, p in self.probes.items()}

    def scale(self, peaks: HostPeaks) -> HostPeaks:
        """The peaks as this run met the machine: each measured field replaced by its value now, the fields that
        follow a probe scaled by its factor, the rest as cached."""
        changed = dict(self.measured)
        for name, probe in FOLLOWS.items():
            if probe in self.probes:
                factor = self.probes[probe]["factor"]  # a speed: a time is divided by it
                changed[name] = getattr(peaks, name) / factor if name.endswith("_ms") else getattr(peaks, name) * factor
        return replace(peaks, **changed)

    def as_dict(self) -> dict:
        contention = self.contention.as_dict() if self.contention is not None else None
        return {"factors": self.factors, "probes": dict(self.probes), "missing": list(self.missing), "contention": contention, "wake": self.wake}


def write_reference(folder: Path) -> Path:
    """The reference probes' models and their list (REFERENCE_FILE) in `folder`, for `python -m sdk profile --reference`."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    listed = []
    for name, (model, feeds, work) in probe_set(last_level_cache(), (*PROBES, LONG)).items():
        (folder / f"{name}.onnx").write_bytes(model)
        inputs = {key: list(value.shape) for key, value in feeds.items()}
        entry = {"name": name, "file": f"{name}.onnx", "inputs": inputs, "work": work, "unit": WORK[PROBES[name][1]] if name in PROBES else "flop"}
        entry |= {"burst": LONG_BURST} if name == LONG else {}
        listed.append(entry | ({"first": WAKE_KERNELS} if name == WAKE_PROBE else {}))
    manifest = {"format": REFERENCE_FORMAT, "burst": BURST, "probes": listed}
    (folder / REFERENCE_FILE).write_text(json.dumps(manifest, indent=1) + "\n")
    return folder


def host_speed(peaks: HostPeaks, reference: dict | None) -> HostSpeed | None:
    """This run's values of the peaks from a raw profile's reference (sdk/profiling/reference.py), and each probe's
    factor against `peaks`; None without a reference."""
    if not reference or not reference.get("probes"):
        return None
    measured: dict[str, float] = {}
    probes, missing = {}, []
    for name, (fields, unit) in PROBES.items():
        raw = reference["probes"].get(name)
        runs = min(len(raw["kernel_ms"]), len(raw["between_ms"])) if raw else 0
        kernel = statistics.median(raw["kernel_ms"]) if runs else 0.0
        if runs < MIN_RUNS or kernel <= 0:
            missing.append(name)
            continue
        values = probe_values(name, raw["work"], kernel, statistics.median(raw["between_ms"]))
        now, cached = sum(values.values()), sum(getattr(peaks, f) for f in fields)
        factor = (now / cached if unit != "ms/node" else cached / now) if cached > 0 and now > 0 else 1.0
        measured |= values
        digits = 5 if unit == "ms/node" else 3
        probes[name] = {"unit": unit, "cached": round(cached, digits), "measured": round(now, digits), "factor": round(factor, 4), "runs": runs}
    wake = profile_wake(reference["probes"].get(WAKE_PROBE), peaks)
    if wake is not None:
        measured["wake_ms"] = wake["measured_ms"]
    return HostSpeed(measured, probes, tuple(missing), contention(reference["probes"]), wake)


def profile_wake(raw: dict | None, peaks: HostPeaks) -> dict | None:
    """The wake as this profile meets it (decision 1264): what the wake probe's first layer took in each burst's cold
    run (the model's frame and the other probes ran before it, its threads asleep) beyond its kept runs. It replaces
    the cached wake, measured after arithmetic on one thread. None where the device did not measure it (an older SDK)
    or too few bursts ran."""
    if not raw or len(raw.get("first_ms", ())) < MIN_RUNS or len(raw.get("cold_first_ms", ())) < MIN_RUNS:
        return None
    now = wake_from(raw["first_ms"], raw["cold_first_ms"])
    return {"cached_ms": round(peaks.wake_ms, 5), "measured_ms": round(now, 5), "runs": len(raw["cold_first_ms"])}


def contention(raw: dict) -> Contention | None:
    """The conv probe's and the long probe's medians (ms per run) -> Contention; None where either ran too little."""
    short, long = raw.get("conv"), raw.get(LONG)
    if not short or not long or len(short["kernel_ms"]) < MIN_RUNS or len(long["kernel_ms"]) < MIN_RUNS:
        return None
    short_ms, long_ms = statistics.median(short["kernel_ms"]), statistics.median(long["kernel_ms"])
    if short_ms <= 0 or long_ms <= 0:
        return None
    return Contention(short_ms, long_ms)
