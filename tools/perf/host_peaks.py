"""`--platform host`: this machine's own peaks, measured once through ONNX Runtime itself and cached by CPU model.

Each probe is a one-node ONNX model run by ONNX Runtime with the SDK's session options (threads and spinning as the
pipeline sets them) and timed by ONNX Runtime's own profiler, as `sdk profile` times layers: the median kernel time
over the runs. The probes: a GEMM and a dense 3x3 convolution (compute peaks), a pointwise and a depthwise convolution
(the two shapes mobile detectors are made of), a 5x5 MaxPool (MLAS's pooling kernel: its rate per window element
against the vector probe's differs from CPU to CPU, 0.8x to 2x measured; decision 1259), memory-bound elementwise
passes over three sizes of tensor (bandwidth: one that fits in the core's caches, one as large as the last-level
cache, one larger than it; on a shared machine other work holds part of that cache, so it is measured, not assumed
ours), and two chains of distinct elementwise nodes (Mul, Add, Clip, Div, each with its own constant and output, as a
model's batch norms and HardSwishes run): one over 16 elements (what a node costs with nothing to do, and ONNX
Runtime's own work between two nodes), one over a tensor the size of a small model's activations, each node reading
what the one before it just wrote (the per-node time a model's small elementwise nodes take, their input hot in the
cache: decision 1200); and a shorter chain over a tensor of 8 MiB (the big hot chain: a detector's activations at full
resolution, its nodes on the pool's threads: decision 1260). The wake probe runs the parallel probe's model with other
work between its runs, as a pipeline runs its model once a frame with its preprocessing and decoding in between: what
a run pays beyond its time in a row is the waking of its threads (decision 1255). The resize probes run a nearest
Resize by 4 (ONNX Runtime's general loop, an index lookup for each output element) and one by 2 (its copy of each input
pixel twice), both on the calling thread (decision 1262).
The cache file is keyed by CPU model, thread count, spinning and ONNX Runtime version; SDK_HOST_PEAKS_REFRESH=1
measures again.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import re
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from tools.perf.host_runs import measure_wake, plain_node_ms

PEAKS_FORMAT = 15  # 10: the launch chain of distinct elementwise nodes, and the hot chain; 11: the wake probe (wake_ms);
# 12: the pooling probe (pool_gflops); 13: the big hot chain (big_node_ms) and the narrow depthwise probe; 14: the
# resize probes (resize_gelems, resize2x_gelems), and the plain runs of the launch and parallel chains; 15: the time
# between the big hot chain's nodes (big_gap_ms), the wake over the first layer's kernels, and the swish probe
RUNS = 12  # runs of a probe in a row; the first (cold) is not kept
CHAIN_NODES = 32  # nodes in the launch probes' chains (the parallel chain has half as many)
CHAIN_OPS = ("Mul", "Add", "Clip", "Div")  # the elementwise chains' nodes in turn, each with its own constant
HOT_ELEMENTS = 1 << 18  # the hot chain's tensor: 1 MiB in and 1 MiB out a node, as the small models' activations (0.1-3 MB)
# The big hot chain's tensor: 8 MiB in and 8 MiB out a node, as a detector's activations at full resolution (6-13 MB in
# the PP-OCRv4 detector); within the last-level cache of the machines measured, where a node's input just written stays.
BIG_ELEMENTS = 1 << 21
BIG_CHAIN = 8  # nodes in the big hot chain
CHAIN = 1  # copies of the probe's node in a chain (measured here: chains of 6 ran convolutions at half the rate a model's own do)
LONG_CHAIN = 8  # convolutions in the long reference probe: about 15-30 ms of work, as a large model's largest layers
PEAK_PROBES = ("gemm", "conv", "pointwise", "depthwise", "dwnarrow", "dram", "llc", "cache", "chain", "nodes", "bignodes", "parallel", "narrow",
               "vector", "swish", "lrn", "pool", "resize", "resize2x")  # fmt: skip
# The depthwise probes' output rows: MLAS runs its NCHWc depthwise kernel once a row of a channel block, so a row's
# fixed work is shared by its pixels (decision 1261). The narrow probe's rows are 10 wide, as a detector's last maps.
DEPTHWISE_WIDTH, DEPTHWISE_NARROW_WIDTH = 80, 10
CACHE_ELEMENTS = 1 << 19  # the cache probe's tensor: 2 MiB in and 2 MiB out, the size of a mobile detector's activations
PASSES = 5  # passes spread the probes over seconds: a shared machine gives a 2-thread kernel one core or two, by moments
# The resize probes: a detector's feature map (16 channels of 40 x 40) resized by 4 to 1.6 MB, as a text detector's
# feature pyramid does before it concatenates its levels (PP-OCRv4's detector: by 4 and by 8); and 24 channels of
# 80 x 80 doubled to 2.5 MB (its top-down path), ONNX Runtime's copy of each input pixel twice along a row.
RESIZE_INPUT, RESIZE_SCALE = (1, 16, 40, 40), 4
RESIZE2X_INPUT = (1, 24, 80, 80)


@dataclass(frozen=True)
class HostPeaks:
    cpu: str
    threads: int
    spinning: bool
    runtime: str
    gemm_gflops: float  # a large MatMul
    conv_gflops: float  # a dense 3x3 convolution
    pointwise_gflops: float  # a 1x1 convolution
    depthwise_gflops: float  # a 3x3 depthwise convolution (rows DEPTHWISE_WIDTH wide)
    dram_gbs: float  # an elementwise pass over a tensor larger than the last-level cache (bytes read + written per second)
    llc_gbs: float  # the same moving as many bytes as the last-level cache holds (at least twice the cache probe's)
    cache_gbs: float  # the same over a tensor that fits in the core's caches (CACHE_ELEMENTS)
    launch_ms: float  # an elementwise node that does almost nothing, in a chain of distinct ones (its kernel time)
    gap_ms: float  # the time between two such nodes' kernels (reported; the prediction takes the hot chain's)
    node_ms: float  # an elementwise node of the hot chain (HOT_ELEMENTS, its input just written by the node before): kernel time
    node_gap_ms: float  # the time between two nodes' kernels in the hot chain
    big_node_ms: float  # an elementwise node of the big hot chain (BIG_ELEMENTS, its input just written): kernel time
    parallel_launch_ms: float  # a convolution with almost nothing to do (what splitting work over the threads costs)
    parallel_gap_ms: float  # the time between two such convolutions' kernels
    narrow_gflops: float  # a 1x1 convolution of 16 to 16 channels: what few channels leave of the pointwise rate
    vector_gflops: float  # a Sigmoid over a tensor in cache (4 FLOPs an element): elementwise arithmetic
    lrn_gflops: float  # LRN (size 5) as layers.py counts it (5 FLOPs an element): ONNX Runtime runs it far below the rest
    pool_gflops: float  # a 5x5 MaxPool as layers.py counts it (one FLOP a window element): MLAS's own pooling kernel
    dwnarrow_gflops: float  # the same depthwise convolution over rows DEPTHWISE_NARROW_WIDTH wide
    last_level_cache_bytes: int
    # A nearest Resize by 4 (ONNX Runtime's general loop, on the calling thread): output elements a second, in billions
    resize_gelems: float = 0.0
    resize2x_gelems: float = 0.0  # a nearest Resize by 2 (its copy of each input pixel twice, on the calling thread): the same
    # A node of the launch chain and a convolution of the parallel chain in a run without the profiler, the time after it
    # included: what each costs a pipeline's run, where ONNX Runtime's profiler is off (decision 1263)
    plain_node_ms: float = 0.0
    plain_parallel_ms: float = 0.0
    # What a run's first layer takes beyond its time in a row when the run follows other work (its threads asleep,
    # WAKE_GAP_S): paid once a frame, by the first layer the model runs (decisions 1255, 1264).
    wake_ms: float = 0.0
    # The time between two nodes' kernels in the big hot chain: with the launch and hot chains', how ONNX Runtime's own
    # work between two nodes grows with the bytes a node reads and writes (decision 1264)
    big_gap_ms: float = 0.0
    # x * Sigmoid(x) over the vector probe's tensor, which ONNX Runtime runs as one QuickGelu node (a Sigmoid's 4 FLOPs
    # and a Mul's 1 an element, as layers.py counts them): a Swish's rate, not the vector probe's (decision 1264)
    swish_gflops: float = 0.0

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


def _model(op: str, inputs: dict[str, tuple], output: tuple, weights: dict[str, np.ndarray], repeat: int = CHAIN, **attrs) -> bytes:
    """`repeat` copies of one node in a chain (each shape-preserving, the weights shared): after the first, the threads
    are awake and the caches warm, as for a model's consecutive layers."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    ((name, _),) = inputs.items()
    names = [name, *(f"y{i}" for i in range(1, repeat)), "y"]
    graph = helper.make_graph(
        [helper.make_node(op, [names[i], *weights], [names[i + 1]], **attrs) for i in range(repeat)],
        "probe",
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, shape) for name, shape in inputs.items()],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, output)],
        [numpy_helper.from_array(value, name) for name, value in weights.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


class _Probe:
    """One probe's ONNX Runtime session with the profiler on; `run()` once a round, `result()` at the end."""

    def __init__(self, name: str, model: bytes, feeds: dict[str, np.ndarray], threads: int | None, spinning: bool, folder: Path) -> None:
        import onnxruntime as ort

        from sdk.backends.onnxruntime_cpu import session_options

        options = session_options(threads, spinning=spinning)
        options.enable_profiling = True
        options.profile_file_prefix = str(folder / f".probe-{name}-{os.getpid()}")  # a trace file of its own
        self.session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
        self.feeds = feeds

    def run(self) -> None:
        self.session.run(None, self.feeds)

    def _trace(self) -> tuple[list[float], list[dict]]:
        """The profiler's trace, parsed (each run's time, the nodes with their times in each run), its file removed."""
        from sdk.profiling.trace import parse_trace

        trace = Path(self.session.end_profiling())
        try:
            return parse_trace(json.loads(trace.read_text()))
        finally:
            trace.unlink(missing_ok=True)

    def result(self) -> tuple[np.ndarray, np.ndarray]:
        """(each run's kernel time, each run's time outside its kernels), in ms, leaving out the first run (cold
        caches, threads starting)."""
        from sdk.profiling.reference import probe_times

        runs, nodes = self._trace()
        # The probe's own kernels: the NCHWc reorders around a lone convolution are not its cost (in a model they are
        # predicted where they fall, tools/perf/predict.py: reorders).
        kernel, between = probe_times(runs, nodes, [i > 0 for i in range(len(runs))])
        return np.asarray(kernel), np.asarray(between)

    def first_kernels(self, count: int) -> list[float]:
        """Each run's first `count` kernels together, the NCHWc reorders included (ms): where a woken run pays."""
        runs, nodes = self._trace()
        return [float(sum(node["times_ms"][i] for node in nodes[:count])) for i in range(len(runs))]


def _chain(count: int, elements: int):
    """`count` distinct elementwise nodes one after another (CHAIN_OPS in turn, each with its own constant, each writing
    a tensor of its own) over `elements` floats: each node reads what the one before it has just written. Multipliers
    and divisors near 1, a clip at +-6: the values stay finite however long the chain."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    nodes, constants = [], []
    for i in range(count):
        op, x, y = CHAIN_OPS[i % len(CHAIN_OPS)], f"t{i}", f"t{i + 1}"
        names = [f"lo{i}", f"hi{i}"] if op == "Clip" else [f"c{i}"]
        values = [-6.0, 6.0] if op == "Clip" else [1.0 + 0.001 * (i + 1)]
        constants += [numpy_helper.from_array(np.array(v, dtype=np.float32), n) for n, v in zip(names, values, strict=True)]
        nodes.append(helper.make_node(op, [x, *names], [y]))
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("t0", TensorProto.FLOAT, (elements,))],
                              [helper.make_tensor_value_info(f"t{count}", TensorProto.FLOAT, (elements,))], constants)  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


def _swish(elements: int) -> bytes:
    """x * Sigmoid(x) over `elements` floats: ONNX Runtime fuses the two into one QuickGelu node (alpha 1)."""
    import onnx
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Sigmoid", ["x"], ["s"]), helper.make_node("Mul", ["x", "s"], ["y"])]
    graph = helper.make_graph(nodes, "swish", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (elements,))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, (elements,))])  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


def _resize(shape: tuple[int, ...], scale: int) -> bytes:
    """A nearest Resize of `shape` by `scale` in height and width (asymmetric, floor): by 2, ONNX Runtime's copy of
    each input pixel twice; by any other scale, its general loop, an index lookup for each output element."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    scales = numpy_helper.from_array(np.array([1, 1, scale, scale], dtype=np.float32), "scales")
    node = helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    out = (*shape[:2], shape[2] * scale, shape[3] * scale)
    graph = helper.make_graph([node], "resize", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)], [scales])  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


def probe_set(llc: int, only: tuple[str, ...] = PEAK_PROBES) -> dict[str, tuple[bytes, dict[str, np.ndarray], int]]:
    """name -> (the probe's ONNX model, its feeds, its work: FLOPs, bytes or nodes) for the probes in `only` (default:
    those the peaks are measured by). The weights and feeds are fixed pseudo-random values in [0, 1)."""
    rng = np.random.default_rng(0)

    def rand(*shape):
        return rng.random(shape, dtype=np.float32)

    sizes = bandwidth_sizes(llc)
    big, middle, small = (sizes[name] // 8 for name in ("dram", "llc", "cache"))  # elements: 4 bytes read and 4 written each
    makers = {
        "gemm": lambda: (_model("MatMul", {"a": (256, 1024)}, (256, 1024), {"b": rand(1024, 1024)}), {"a": rand(256, 1024)},
                         2 * 256 * 1024 * 1024),
        "conv": lambda: (_model("Conv", {"x": (1, 64, 56, 56)}, (1, 64, 56, 56), {"w": rand(64, 64, 3, 3)}, pads=[1, 1, 1, 1]),
                         {"x": rand(1, 64, 56, 56)}, 2 * 64 * 56 * 56 * 64 * 9),
        "pointwise": lambda: (_model("Conv", {"x": (1, 128, 40, 40)}, (1, 128, 40, 40), {"w": rand(128, 128, 1, 1)}),
                              {"x": rand(1, 128, 40, 40)}, 2 * 128 * 40 * 40 * 128),
        "depthwise": lambda: (_model("Conv", {"x": (1, 128, 80, 80)}, (1, 128, 80, 80), {"w": rand(128, 1, 3, 3)}, pads=[1, 1, 1, 1],
                                     group=128), {"x": rand(1, 128, 80, 80)}, 2 * 128 * 80 * 80 * 9),
        "dwnarrow": lambda: (_model("Conv", {"x": (1, 1024, 40, 10)}, (1, 1024, 40, 10), {"w": rand(1024, 1, 3, 3)}, pads=[1, 1, 1, 1],
                                    group=1024), {"x": rand(1, 1024, 40, 10)}, 2 * 1024 * 40 * 10 * 9),
        "dram": lambda: (_model("Relu", {"x": (big,)}, (big,), {}), {"x": rand(big)}, 8 * big),  # bytes read and written once
        "llc": lambda: (_model("Relu", {"x": (middle,)}, (middle,), {}), {"x": rand(middle)}, 8 * middle),
        "cache": lambda: (_model("Relu", {"x": (small,)}, (small,), {}), {"x": rand(small)}, 8 * small),
        "chain": lambda: (_chain(CHAIN_NODES, 16), {"t0": rand(16)}, CHAIN_NODES),
        "nodes": lambda: (_chain(CHAIN_NODES, HOT_ELEMENTS), {"t0": rand(HOT_ELEMENTS)}, CHAIN_NODES),
        "bignodes": lambda: (_chain(BIG_CHAIN, BIG_ELEMENTS), {"t0": rand(BIG_ELEMENTS)}, BIG_CHAIN),
        "parallel": lambda: (_model("Conv", {"x": (1, 8, 8, 8)}, (1, 8, 8, 8), {"w": rand(8, 8, 1, 1)}, repeat=CHAIN_NODES // 2),
                             {"x": rand(1, 8, 8, 8)}, CHAIN_NODES // 2),
        "one": lambda: (_model("Conv", {"x": (1, 8, 8, 8)}, (1, 8, 8, 8), {"w": rand(8, 8, 1, 1)}), {"x": rand(1, 8, 8, 8)}, 1),  # its node alone
        "narrow": lambda: (_model("Conv", {"x": (1, 16, 160, 160)}, (1, 16, 160, 160), {"w": rand(16, 16, 1, 1)}),
                           {"x": rand(1, 16, 160, 160)}, 2 * 16 * 160 * 160 * 16),
        "vector": lambda: (_model("Sigmoid", {"x": (small,)}, (small,), {}), {"x": rand(small)}, 4 * small),
        "swish": lambda: (_swish(small), {"x": rand(small)}, 5 * small),
        "lrn": lambda: (_model("LRN", {"x": (1, 64, 28, 28)}, (1, 64, 28, 28), {}, size=5), {"x": rand(1, 64, 28, 28)}, 5 * 64 * 28 * 28),
        "pool": lambda: (_model("MaxPool", {"x": (1, 64, 28, 28)}, (1, 64, 28, 28), {}, kernel_shape=[5, 5], pads=[2, 2, 2, 2]),
                         {"x": rand(1, 64, 28, 28)}, 25 * 64 * 28 * 28),
        "resize": lambda: (_resize(RESIZE_INPUT, RESIZE_SCALE), {"x": rand(*RESIZE_INPUT)}, math.prod(RESIZE_INPUT) * RESIZE_SCALE**2),
        "resize2x": lambda: (_resize(RESIZE2X_INPUT, 2), {"x": rand(*RESIZE2X_INPUT)}, math.prod(RESIZE2X_INPUT) * 4),
        # The conv probe's node LONG_CHAIN times in a row: one long run, for how a shared machine stretches long kernels
        # (tools/perf/host_speed.py: Contention); not one of the peaks.
        "long": lambda: (_model("Conv", {"x": (1, 64, 56, 56)}, (1, 64, 56, 56), {"w": rand(64, 64, 3, 3)}, repeat=LONG_CHAIN, pads=[1, 1, 1, 1]),
                         {"x": rand(1, 64, 56, 56)}, LONG_CHAIN * 2 * 64 * 56 * 56 * 64 * 9),
    }  # fmt: skip
    return {name: make() for name, make in makers.items() if name in only}


def bandwidth_sizes(llc: int) -> dict[str, int]:
    """Bytes each bandwidth probe moves (read + written): `cache` fits in a core's caches, `llc` is the last-level
    cache's size (at least twice `cache`), `dram` four times it (at least 32 MiB); `hot` and `big`: each node of the
    hot chain and of the big hot chain."""
    cache = 8 * CACHE_ELEMENTS
    return {"hot": 8 * HOT_ELEMENTS, "big": 8 * BIG_ELEMENTS, "cache": cache, "llc": max(llc, 2 * cache), "dram": 8 * max(llc // 2, 1 << 22)}


def probe_values(name: str, work: int, kernel_ms: float, between_ms: float) -> dict[str, float]:
    """The peaks' fields one probe gives, from its typical kernel time and time between kernels (ms): a rate (work
    over time: GFLOP/s or GB/s), or for the chains of nodes the time per node."""
    if name == "chain":
        return {"launch_ms": kernel_ms / work, "gap_ms": max(between_ms, 0.0) / work}
    if name == "nodes":
        return {"node_ms": kernel_ms / work, "node_gap_ms": max(between_ms, 0.0) / work}
    if name == "bignodes":
        return {"big_node_ms": kernel_ms / work, "big_gap_ms": max(between_ms, 0.0) / work}
    if name == "parallel":
        return {"parallel_launch_ms": kernel_ms / work, "parallel_gap_ms": max(between_ms, 0.0) / work}
    if name in ("resize", "resize2x"):
        return {f"{name}_gelems": work / (kernel_ms * 1e6)}
    field = {"dram": "dram_gbs", "llc": "llc_gbs", "cache": "cache_gbs"}.get(name, f"{name}_gflops")
    return {field: work * CHAIN / (kernel_ms * 1e6)}


def measure_peaks(threads: int | None, spinning: bool, folder: Path, runs: int = RUNS, passes: int = PASSES) -> HostPeaks:
    """Run the probes (a few seconds) and return the peaks."""
    import onnxruntime as ort

    folder.mkdir(parents=True, exist_ok=True)
    llc = last_level_cache()
    probes = probe_set(llc)
    found: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {name: [] for name in probes}
    wakes: list[float] = []
    plain: dict[str, list[float]] = {"chain": [], "parallel": []}
    ones = {"chain": _chain(1, 16), "parallel": probe_set(llc, ("one",))["one"][0]}
    for _ in range(passes):  # the whole sequence again: a load spike on a shared machine spoils one pass of a probe, not all
        for name, (model, feeds, _) in probes.items():  # one at a time, its runs in a row: warm caches, its own threads awake
            probe = _Probe(name, model, feeds, threads, spinning, folder)
            for _ in range(max(runs, 2)):
                probe.run()
            found[name].append(probe.result())
            del probe
        model, feeds, _ = probes["parallel"]
        wakes.append(measure_wake(_Probe("wake", model, feeds, threads, spinning, folder), max(runs, 2)))
        for name in plain:  # the same chains without the profiler: what their nodes cost a pipeline's run
            model, feeds, nodes = probes[name]
            plain[name].append(plain_node_ms(model, ones[name], feeds, nodes, threads, spinning, 2 * max(runs, 2)))
    # Each pass's median, and the middle pass: the machine as a profile meets it, neither its best nor its worst moment.
    results = {name: sorted((float(np.median(p[0])), float(np.median(p[1]))) for p in runs)[len(runs) // 2] for name, runs in found.items()}
    values: dict[str, float] = {}
    for name, (kernel, between) in results.items():
        values |= probe_values(name, probes[name][2], kernel, between)
    values["wake_ms"] = sorted(wakes)[len(wakes) // 2]  # the middle pass, as for the others
    values["plain_node_ms"], values["plain_parallel_ms"] = (sorted(plain[name])[len(plain[name]) // 2] for name in ("chain", "parallel"))
    digits = dict.fromkeys(("launch_ms", "gap_ms", "node_ms", "node_gap_ms", "big_node_ms", "big_gap_ms", "parallel_launch_ms", "parallel_gap_ms",
                            "wake_ms", "plain_node_ms", "plain_parallel_ms"), 6)  # fmt: skip
    return HostPeaks(
        cpu=cpu_model(), threads=threads or os.cpu_count() or 1, spinning=spinning, runtime=f"onnxruntime {ort.__version__}",
        last_level_cache_bytes=llc, **{k: round(v, digits.get(k, 3)) for k, v in values.items()},
    )  # fmt: skip


def peaks_path(threads: int | None, spinning: bool, cache_root: Path) -> tuple[Path, str]:
    """(the cache file, its key) of this CPU model's peaks for (threads, spinning) under this ONNX Runtime."""
    import onnxruntime as ort

    threads = threads or os.cpu_count() or 1
    key = json.dumps([PEAKS_FORMAT, cpu_model(), threads, spinning, ort.__version__])
    return Path(cache_root) / "host-peaks" / f"{hashlib.sha256(key.encode()).hexdigest()[:16]}.json", key


def store_peaks(peaks: HostPeaks, key: str, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps({"key": json.loads(key), "peaks": peaks.as_dict()}, indent=1) + "\n")
    os.replace(partial, path)


def host_peaks(threads: int | None, spinning: bool, cache_root: Path, refresh: bool = False) -> HostPeaks:
    """This machine's peaks for (threads, spinning): from the cache, or measured once and cached."""
    path, key = peaks_path(threads, spinning, cache_root)
    if path.is_file() and not refresh and not os.environ.get("SDK_HOST_PEAKS_REFRESH"):
        try:
            return HostPeaks(**json.loads(path.read_text())["peaks"])
        except (ValueError, KeyError, TypeError):
            pass  # an unreadable cache is measured again
    peaks = measure_peaks(threads, spinning, path.parent)
    store_peaks(peaks, key, path)
    return peaks
