"""Reference probes timed between a CPU profile's frames: how fast this machine runs at the moment of the profile.

On a shared machine a two-thread kernel gets one core or two depending on the moment, so host peaks measured once
(tools/perf/host_peaks.py) describe another moment than the profile's. The host writes a few of its own probe models
into a folder (REFERENCE_FILE lists them: file, input shapes, work); `python -m sdk profile --reference DIR` runs each
one in a short burst after every frame, in the same process, with the same session options (threads, spinning) as
the model, and ONNX Runtime's profiler times them as it times the model's layers. The first run of a burst is cold
(the model's run came between) and is not kept, as the peaks' probes drop their first run. The host compares the kept
runs' medians with the cached peaks (tools/perf/host_speed.py). A probe listed with `first: N` also gives its first N
kernels in each run, the cold runs' apart: what a run pays to start after other work (the host's wake). Nothing here
analyses or judges.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

REFERENCE_FILE = "reference.json"
REFERENCE_FORMAT = 1
REORDERS = ("ReorderInput", "ReorderOutput")  # NCHWc layout changes around a lone convolution: not the probe's own cost


def probe_times(runs: list[float], nodes: list[dict], keep: list[bool] | None = None) -> tuple[list[float], list[float]]:
    """(each kept run's own kernel time, each kept run's time outside its kernels), in ms, from a probe's parsed trace
    (sdk/profiling/trace.py: parse_trace). The probe's own kernels leave out the NCHWc reorders; the time
    outside the kernels is the run less every kernel, reorders included (ONNX Runtime's own work per node)."""
    if not runs:
        return [], []
    zero = np.zeros(len(runs))
    own = np.sum([n["times_ms"] for n in nodes if n["op"] not in REORDERS] or [zero], axis=0)
    between = np.asarray(runs, dtype=float) - np.sum([n["times_ms"] for n in nodes] or [zero], axis=0)
    kept = [i for i in range(len(runs)) if keep is None or keep[i]]
    return [round(float(own[i]), 5) for i in kept], [round(float(between[i]), 5) for i in kept]


class ReferenceProbes:
    """The probes of a reference folder, each in its own profiled session with the model's options; `burst()` after
    every frame, `finish()` once at the end."""

    def __init__(self, folder: Path, threads: int | None, spinning: bool, trace_folder: Path) -> None:
        import onnxruntime as ort

        from sdk.backends.onnxruntime_cpu import session_options

        folder = Path(folder)
        manifest = json.loads((folder / REFERENCE_FILE).read_text())
        if manifest.get("format") != REFERENCE_FORMAT:
            raise ValueError(f"{folder / REFERENCE_FILE}: format {manifest.get('format')!r}, expected {REFERENCE_FORMAT}")
        default = int(manifest.get("burst", 3))
        self.probes = []
        rng = np.random.default_rng(0)
        for probe in manifest["probes"]:
            options = session_options(threads, spinning=spinning)
            options.enable_profiling = True
            options.profile_file_prefix = str(Path(trace_folder) / f".reference-{probe['name']}")
            options.log_severity_level = 3
            session = ort.InferenceSession(str(folder / probe["file"]), options, providers=["CPUExecutionProvider"])
            feeds = {name: rng.random(tuple(shape), dtype=np.float32) for name, shape in probe["inputs"].items()}
            runs = max(int(probe.get("burst", default)), 2)  # runs per burst; the first is not kept
            self.probes.append((probe, session, feeds, runs))
        self.bursts = 0

    def burst(self) -> None:
        for _, session, feeds, runs in self.probes:
            for _ in range(runs):
                session.run(None, feeds)
        self.bursts += 1

    def finish(self, skip_bursts: int = 0) -> dict:
        """The raw reference: per probe its work and unit, and each kept run's kernel time and time between kernels;
        the first `skip_bursts` bursts (the warm-up frames') are left out."""
        from sdk.profiling.trace import parse_trace

        found = {}
        for probe, session, _, burst in self.probes:
            trace = Path(session.end_profiling())
            try:
                runs, nodes = parse_trace(json.loads(trace.read_text()), skip_bursts * burst)
            finally:
                trace.unlink(missing_ok=True)
            keep = [i % burst != 0 for i in range(len(runs))]  # each burst's first run is cold
            kernel_ms, between_ms = probe_times(runs, nodes, keep)
            found[probe["name"]] = {"work": probe["work"], "unit": probe["unit"], "burst": burst, "kernel_ms": kernel_ms, "between_ms": between_ms}
            if probe.get("first"):  # its first kernels in each run: what the cold runs (the model's ran before) pay beyond the kept
                first = [round(float(sum(n["times_ms"][i] for n in nodes[: int(probe["first"])])), 5) for i in range(len(runs))]
                found[probe["name"]] |= {"first_ms": [v for v, k in zip(first, keep, strict=True) if k],
                                         "cold_first_ms": [v for v, k in zip(first, keep, strict=True) if not k]}  # fmt: skip
        return {"format": REFERENCE_FORMAT, "probes": found}
