"""ONNX Runtime's own profiler on the CPU backend: per-node kernel times, per frame.

Two sessions with the runtime's own options (sdk/backends/onnxruntime_cpu.py: session_options) run the same inputs in
turn, frame after frame: one plain (its wall time is what the model costs), one with `enable_profiling` (its trace
gives every node's kernel time and the run's own time). Alternating them puts both under the same load, so the
difference of their medians is the profiler's own overhead per frame. The profiled session also writes the graph it
really ran (`optimized_model_filepath`): after ONNX Runtime's fusions and layout changes its nodes are not the prepared
model's, and the host maps them back (tools/perf/mapping.py). Inputs are fixed pseudo-random values: a convolutional
core's time does not depend on them.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np

from sdk.errors import ModelError, missing_dependency
from sdk.profiling import OPTIMIZED_FILE, RAW_FORMAT
from sdk.profiling.trace import parse_trace

NUMPY = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64, "tensor(uint8)": np.uint8,
         "tensor(int8)": np.int8, "tensor(int32)": np.int32, "tensor(int64)": np.int64, "tensor(bool)": np.bool_}  # fmt: skip


def _inputs(session, batch: int, constants: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    feeds = {}
    for arg in session.get_inputs():
        if constants and arg.name in constants:
            feeds[arg.name] = constants[arg.name]
            continue
        shape = [d if isinstance(d, int) and d > 0 else (batch if i == 0 else None) for i, d in enumerate(arg.shape)]
        if None in shape:
            raise ModelError(f"input {arg.name!r} has a dynamic shape {arg.shape}", hint="give model.prepare.inputs a static shape")
        dtype = NUMPY.get(arg.type)
        if dtype is None:
            raise ModelError(f"input {arg.name!r} has an unsupported type {arg.type}")
        feeds[arg.name] = (rng.random(shape) * (255 if dtype == np.uint8 else 1)).astype(dtype)
    return feeds


def profile_onnxruntime(
    model_path: Path,
    out_dir: Path,
    *,
    frames: int = 50,
    warmup: int = 5,
    threads: int | None = None,
    spinning: bool = True,
    batch: int = 1,
    constants: dict[str, np.ndarray] | None = None,
    reference: Path | None = None,
) -> dict:
    """Profile `model_path` for `frames` frames after `warmup`; returns the raw profile (and writes OPTIMIZED_FILE).
    `reference`: a folder of reference probes (sdk/profiling/reference.py), each run in a burst after every frame."""
    try:
        import onnxruntime as ort
    except ImportError:
        raise missing_dependency("onnxruntime", "pip install onnxruntime") from None
    from sdk.backends.onnxruntime_cpu import session_options

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    plain_options = session_options(threads, spinning=spinning)
    options = session_options(threads, spinning=spinning)
    options.enable_profiling = True
    options.profile_file_prefix = str(out_dir / ".ort-trace")
    options.optimized_model_filepath = str(out_dir / OPTIMIZED_FILE)
    options.log_severity_level = 3  # the warning that an NCHWc graph is hardware specific: it is, and it is only read back here
    try:
        plain = ort.InferenceSession(str(model_path), plain_options, providers=["CPUExecutionProvider"])
        profiled = ort.InferenceSession(str(model_path), options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # ORT raises its own exception types per failure
        raise ModelError(f"ONNX Runtime cannot load {model_path}: {exc}") from None
    feeds = _inputs(plain, batch, constants)
    probes = None
    if reference is not None:
        from sdk.profiling.reference import ReferenceProbes

        try:
            probes = ReferenceProbes(reference, threads, spinning, out_dir)
        except Exception as exc:  # ORT raises its own exception types; a bad folder is the host's mistake
            raise ModelError(f"the reference probes in {reference} cannot run: {exc}") from None
    plain_ms, profiled_ms = [], []
    for index in range(warmup + frames):
        for session, times in ((plain, plain_ms), (profiled, profiled_ms)):
            started = time.perf_counter()
            session.run(None, feeds)
            if index >= warmup:
                times.append((time.perf_counter() - started) * 1e3)
        if probes is not None:  # after the frame: the same moment of the machine, not in the model's runs
            probes.burst()
    trace = Path(profiled.end_profiling())
    try:
        events = json.loads(trace.read_text())
    finally:
        trace.unlink(missing_ok=True)
    runs, nodes = parse_trace(events, warmup)
    raw_reference = probes.finish(skip_bursts=warmup) if probes is not None else None
    return {
        "format": RAW_FORMAT,
        "backend": "onnxruntime",
        "runtime": f"onnxruntime {ort.__version__}",
        "model": Path(model_path).name,
        "threads": threads,
        "spinning": spinning,
        "batch": batch,
        "warmup": warmup,
        "frames": len(runs),
        "cpu_count": os.cpu_count(),
        "unprofiled_ms": [round(v, 4) for v in plain_ms],
        "profiled_wall_ms": [round(v, 4) for v in profiled_ms],
        "run_ms": runs,
        "nodes": nodes,
        "optimized_model": OPTIMIZED_FILE,
        "reference": raw_reference,
    }
