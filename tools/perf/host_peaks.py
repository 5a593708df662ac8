"""`--platform host`: this machine's own peaks, measured once through ONNX Runtime itself and cached by CPU model.

Each probe is a one-node ONNX model run by ONNX Runtime with the SDK's session options (threads and spinning as the
pipeline sets them) and timed by ONNX Runtime's own profiler, as `sdk profile` times layers: the median kernel time
over the runs. The probes: a GEMM and a dense 3x3 convolution (compute peaks), a pointwise and a depthwise
convolution (the two shapes mobile detectors are made of), a memory-bound elementwise copy of a tensor larger than the
last-level cache and one that fits in it (bandwidth), and a node that does almost nothing (the per-layer launch cost).
The cache file is keyed by CPU model, thread count, spinning and ONNX Runtime version; SDK_HOST_PEAKS_REFRESH=1
measures again.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

PEAKS_FORMAT = 3
PROBE_RUNS = 40


@dataclass(frozen=True)
class HostPeaks:
    cpu: str
    threads: int
    spinning: bool
    runtime: str
    gemm_gflops: float  # a large MatMul
    conv_gflops: float  # a dense 3x3 convolution
    pointwise_gflops: float  # a 1x1 convolution
    depthwise_gflops: float  # a 3x3 depthwise convolution
    dram_gbs: float  # an elementwise pass over a tensor larger than the last-level cache (bytes read + written per second)
    cache_gbs: float  # the same over a tensor that fits in it
    launch_ms: float  # a node that does almost nothing
    parallel_launch_ms: float  # a convolution with almost nothing to do (what splitting work over the threads costs)
    narrow_gflops: float  # a 1x1 convolution of 16 to 16 channels: what few channels leave of the pointwise rate
    vector_gflops: float  # a Sigmoid over a tensor in cache (4 FLOPs an element): elementwise arithmetic
    last_level_cache_bytes: int

    def as_dict(self) -> dict:
        return asdict(self)


def cpu_model() -> str:
    """The CPU's model name (Linux /proc/cpuinfo; elsewhere platform.processor())."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith(("model name", "hardware", "cpu model")):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def last_level_cache() -> int:
    """Bytes of the last-level cache (sysfs), 8 MiB where it cannot be read."""
    best = 0
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            text = (index / "size").read_text().strip()
        except OSError:
            continue
        match = re.match(r"(\d+)([KMG]?)", text)
        if match:
            best = max(best, int(match.group(1)) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[match.group(2)])
    return best or 8 << 20


def _model(op: str, inputs: dict[str, tuple], output: tuple, weights: dict[str, np.ndarray], **attrs):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        [helper.make_node(op, [*inputs, *weights], ["y"], **attrs)],
        "probe",
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, shape) for name, shape in inputs.items()],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, output)],
        [numpy_helper.from_array(value, name) for name, value in weights.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


def _kernel_ms(model: bytes, feeds: dict[str, np.ndarray], threads: int | None, spinning: bool, folder: Path) -> float:
    """The median kernel time (ms) of the probe's nodes over PROBE_RUNS runs, from ONNX Runtime's profiler."""
    import onnxruntime as ort

    from sdk.backends.onnxruntime_cpu import session_options
    from sdk.profiling.onnxruntime_profile import parse_trace

    options = session_options(threads, spinning=spinning)
    options.enable_profiling = True
    options.profile_file_prefix = str(folder / ".probe")
    session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    warmup = 5
    for _ in range(warmup + PROBE_RUNS):
        session.run(None, feeds)
    trace = Path(session.end_profiling())
    try:
        _, nodes = parse_trace(json.loads(trace.read_text()), warmup)
    finally:
        trace.unlink(missing_ok=True)
    per_run = np.sum([n["times_ms"] for n in nodes], axis=0)
    return float(np.median(per_run))


def measure_peaks(threads: int | None, spinning: bool, folder: Path) -> HostPeaks:
    """Run the probes (a few seconds) and return the peaks."""
    import onnxruntime as ort

    rng = np.random.default_rng(0)
    folder.mkdir(parents=True, exist_ok=True)

    def rand(*shape):
        return rng.random(shape, dtype=np.float32)

    def rate(op, inputs, output, weights, flops, **attrs):
        feeds = {name: rand(*shape) for name, shape in inputs.items()}
        ms = _kernel_ms(_model(op, inputs, output, weights, **attrs), feeds, threads, spinning, folder)
        return flops / (ms * 1e6), ms

    gemm, _ = rate("MatMul", {"a": (256, 1024)}, (256, 1024), {"b": rand(1024, 1024)}, 2 * 256 * 1024 * 1024)
    conv, _ = rate("Conv", {"x": (1, 64, 56, 56)}, (1, 64, 56, 56), {"w": rand(64, 64, 3, 3)}, 2 * 64 * 56 * 56 * 64 * 9, pads=[1, 1, 1, 1])
    pointwise, _ = rate("Conv", {"x": (1, 128, 40, 40)}, (1, 128, 40, 40), {"w": rand(128, 128, 1, 1)}, 2 * 128 * 40 * 40 * 128)
    depthwise, _ = rate(
        "Conv", {"x": (1, 128, 80, 80)}, (1, 128, 80, 80), {"w": rand(128, 1, 3, 3)}, 2 * 128 * 80 * 80 * 9, pads=[1, 1, 1, 1], group=128
    )
    llc = last_level_cache()
    big = max(4 * llc // 4, 1 << 22)  # elements: 16 bytes x LLC read and written
    small = max(llc // 16, 1 << 14)  # a quarter of the cache in and out
    dram, _ = rate("Relu", {"x": (big,)}, (big,), {}, 8 * big)  # bytes, not FLOPs: read and written once
    cache, _ = rate("Relu", {"x": (small,)}, (small,), {}, 8 * small)
    _, launch = rate("Relu", {"x": (16,)}, (16,), {}, 1)
    _, parallel = rate("Conv", {"x": (1, 8, 8, 8)}, (1, 8, 8, 8), {"w": rand(8, 8, 1, 1)}, 1)
    narrow, _ = rate("Conv", {"x": (1, 16, 160, 160)}, (1, 16, 160, 160), {"w": rand(16, 16, 1, 1)}, 2 * 16 * 160 * 160 * 16)
    vector, _ = rate("Sigmoid", {"x": (small,)}, (small,), {}, 4 * small)
    return HostPeaks(
        cpu_model(), threads or os.cpu_count() or 1, spinning, f"onnxruntime {ort.__version__}",
        round(gemm, 3), round(conv, 3), round(pointwise, 3), round(depthwise, 3), round(dram, 3), round(cache, 3), round(launch, 5),
        round(parallel, 5), round(narrow, 3), round(vector, 3), llc,
    )  # fmt: skip


def host_peaks(threads: int | None, spinning: bool, cache_root: Path, refresh: bool = False) -> HostPeaks:
    """This machine's peaks for (threads, spinning): from the cache, or measured once and cached."""
    import onnxruntime as ort

    threads = threads or os.cpu_count() or 1
    key = json.dumps([PEAKS_FORMAT, cpu_model(), threads, spinning, ort.__version__])
    path = Path(cache_root) / "host-peaks" / f"{hashlib.sha256(key.encode()).hexdigest()[:16]}.json"
    if path.is_file() and not refresh and not os.environ.get("SDK_HOST_PEAKS_REFRESH"):
        try:
            return HostPeaks(**json.loads(path.read_text())["peaks"])
        except (ValueError, KeyError, TypeError):
            pass  # an unreadable cache is measured again
    peaks = measure_peaks(threads, spinning, path.parent)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps({"key": json.loads(key), "peaks": peaks.as_dict()}, indent=1) + "\n")
    os.replace(partial, path)
    return peaks
