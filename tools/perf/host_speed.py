"""The host's speed at the moment of a profile, against its cached peaks: what `sdk profile --target local` scales
its `--platform host` prediction by.

The cached peaks (tools/perf/host_peaks.py) were measured once, at some moment, each probe at its own; on a shared
machine a two-thread kernel gets one core or two depending on the moment, and a profile minutes later meets another
machine. So the profile runs the same probes between its frames, in the same process with the same threads and
spinning (sdk/profiling/reference.py), a short burst each after every frame, and each probe's median over the
profile's frames replaces the cached value it measures: the prediction is then made from the same frames, and the
same statistic (medians over frames), as the measured layers it is compared with (decision 0706). Two probes are too
long to repeat between frames: the GEMM follows the pointwise convolution (the same kernel, and the host model takes
the faster of the two), the pass over DRAM follows the pass in cache (the factor of one applied to the other).

Each probe's factor is its speed now over its cached speed (> 1: faster now); `speed_factor` sums them up for the
model: its prediction from the cached peaks over its prediction from this run's. `sdk predict --platform host` has
no run to measure against and keeps the cached peaks.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, replace
from pathlib import Path

from sdk.profiling.reference import REFERENCE_FILE, REFERENCE_FORMAT
from tools.perf.host_peaks import HostPeaks, last_level_cache, probe_set, probe_values

BURST = 3  # runs of each probe after every frame; the first is cold (the model's run evicted it) and is not kept
MIN_RUNS = 5  # a probe with fewer kept runs than this is not used: its fields keep their cached values, said so
# The probes run between the frames, the peaks' fields each measures, and the unit the report shows it in.
PROBES = {
    "conv": (("conv_gflops",), "GFLOP/s"),
    "pointwise": (("pointwise_gflops",), "GFLOP/s"),
    "depthwise": (("depthwise_gflops",), "GFLOP/s"),
    "narrow": (("narrow_gflops",), "GFLOP/s"),
    "vector": (("vector_gflops",), "GFLOP/s"),
    "lrn": (("lrn_gflops",), "GFLOP/s"),
    "cache": (("cache_gbs",), "GB/s"),
    "chain": (("launch_ms", "gap_ms"), "ms/node"),
    "parallel": (("parallel_launch_ms", "parallel_gap_ms"), "ms/node"),
}
FOLLOWS = {"gemm_gflops": "pointwise", "dram_gbs": "cache"}  # fields no probe measures between the frames: scaled by this probe's factor
WORK = {"GFLOP/s": "flop", "GB/s": "byte", "ms/node": "node"}


@dataclass(frozen=True)
class HostSpeed:
    """What each probe measured between the profile's frames, against the cached peaks."""

    measured: dict[str, float]  # peaks' field -> its value in this run (a probe's median over the frames)
    probes: dict[str, dict]  # probe -> {"unit", "cached", "measured", "factor", "runs"}
    missing: tuple[str, ...] = ()  # probes that did not run (enough): their fields keep the cached values

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
                changed[name] = getattr(peaks, name) * self.probes[probe]["factor"]
        return replace(peaks, **changed)

    def as_dict(self) -> dict:
        return {"factors": self.factors, "probes": dict(self.probes), "missing": list(self.missing)}


def write_reference(folder: Path) -> Path:
    """The reference probes' models and their list (REFERENCE_FILE) in `folder`, for `python -m sdk profile --reference`."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    listed = []
    for name, (model, feeds, work) in probe_set(last_level_cache(), tuple(PROBES)).items():
        (folder / f"{name}.onnx").write_bytes(model)
        inputs = {key: list(value.shape) for key, value in feeds.items()}
        listed.append({"name": name, "file": f"{name}.onnx", "inputs": inputs, "work": work, "unit": WORK[PROBES[name][1]]})
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
    return HostSpeed(measured, probes, tuple(missing))
