"""Engines of the performance model: what one layer group costs on this CPU (ONNX Runtime) or on a module's GPU or DLA.

The host's numbers are measured here (tools/perf/host_peaks.py); a module's are its published peaks
(tools/perf/platforms.py) times the efficiencies below, which are the model's own assumptions (decision 0702), not
platform facts: what fraction of a peak a TensorRT kernel of each op class reaches, and what a launch costs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from tools.perf.host_peaks import CACHE_ELEMENTS, DEPTHWISE_NARROW_WIDTH, DEPTHWISE_WIDTH, HostPeaks, bandwidth_sizes
from tools.perf.layers import Layer, strided_transpose
from tools.perf.nchwc import nchwc_capable
from tools.perf.platforms import EnginePeaks

# TensorRT on Orin-class GPUs: fraction of the dense tensor peak per op class (the rest of the roofline is bandwidth).
GPU_EFFICIENCY = {"conv": 0.55, "conv_pointwise": 0.45, "conv_transpose": 0.35, "gemm": 0.5, "conv_depthwise": 0.04}
# What each precision's kernels reach of their own peak, against FP16's (decision 1016, fitted): TF32 kernels lose more
# than the halved peak; INT8 ones gain less than the doubled one, and far less where the convolution's epilogue is a
# gate (SiLU's Sigmoid, Tanh, HardSwish: `int8_gated`) than where it is piecewise linear (ReLU, Clip, none).
GPU_PRECISION_EFFICIENCY = {"fp16": 1.0, "int8": 1.0, "int8_gated": 0.61, "fp32": 0.74}  # "int8" not fitted: one row cannot tell it
GPU_VECTOR_FRACTION = 0.03  # elementwise, pooling, resize, reductions: CUDA-core arithmetic, a small share of the tensor peak
GPU_BANDWIDTH_EFFICIENCY = 0.7  # of the DRAM peak, for streaming kernels
GPU_LAUNCH_MS = 0.0036  # per kernel in an engine (the gap between kernels); fitted (decision 1016), was 0.006
# The DLA (decision 1017): a convolution's rate is the clocked MAC array's peak times its op class's efficiency, times
# what a small output map leaves of it (1 - exp(-pixels / DLA_ROWS_HALF), per image); the bytes a layer moves go
# through DRAM at DLA_BANDWIDTH_EFFICIENCY of its peak, not hidden under the arithmetic (the DLA runs a layer's
# fetch, compute and write-back in turn); each layer pays DLA_LAYER_MS, which the DLA's clock does not shorten. The
# clock scales the arithmetic alone, so a mode at a third of the clock is not three times slower: NVIDIA's MAXN/15W
# pairs (DLA-SW) show 1.9-2.4x for a 2.6x clock ratio. Every value below is fitted on DLA-SW rows (decision 1016);
# the depthwise share sits at the fit's lower bound (0.01), the dense one near the peak. The dense share, the bandwidth
# share and the per-layer cost were refitted on the same rows once the image-input mode costed the networks' first
# convolutions (decision 1140: `python tests/benchmarks/bench_published.py --fit`); the op-class shares are 1016's.
DLA_EFFICIENCY = {"conv": 0.93, "conv_pointwise": 0.8, "conv_transpose": 0.64, "gemm": 0.64, "conv_depthwise": 0.01}
DLA_GROUPED = 0.11  # a grouped (not depthwise) convolution's share of the dense rate (ResNeXt's 32 groups)
DLA_ROWS_HALF = 66.0  # output pixels per image at which a DLA convolution reaches 1 - 1/e of its rate (a 7x7 map: 0.52)
DLA_BANDWIDTH_EFFICIENCY = 0.6
DLA_VECTOR_FRACTION = 0.02
DLA_LAYER_MS = 0.0057  # each DLA layer's fixed cost, independent of the DLA's clock
DLA_SUBGRAPH_MS = 0.06  # each DLA subgraph's submission and completion (cuDLA/TensorRT task)
CHANNEL_ALIGN = {"fp16": 8, "int8": 32, "fp32": 4}  # tensor-core channel multiples TensorRT wants (fp32 runs as TF32)
TRANSITION_MS = 0.02  # a GPU<->DLA boundary's fixed cost, on top of the reformat and copy of its bytes
NCHW_INPUT_STRIDED = 0.5  # a strided 3x3 convolution of an NCHW input (fewer channels than a block): 0.3-0.5 of the peak here
GENERIC_CONV = 0.45  # a grouped convolution whose groups are not whole blocks: ShuffleNet's measured here at 0.4-0.5
# A threaded node's (a convolution's, a GEMM's) launch, against the parallel probe, which repeats one tiny convolution:
# the five benchmark models' were 1.7-2x the probe's (bench_profile.py; checked on the light models). Read off those
# models, not measured. It applies to every node ONNX Runtime splits over its threads (HostEngine.threaded; decision
# 1259); every other node (elementwise, movement, a GEMM of few multiplies, an NCHWc reorder too small to wake the
# threads) is costed from the chains of distinct elementwise nodes, without it (decision 1200). The time after a node,
# threaded or not, is measured on the chains (tools/perf/between_nodes.py; decision 1264).
NODE_COST = 1.8
# A threaded node's work (on one thread) up to which the calling thread finishes it before a woken thread could start
# (a futex wake-up takes microseconds): it costs a plain node. Read off PaddleOCR's classifier: its squeeze-and-
# excitation tensors' reorders (under 0.05 us of work) cost a plain node, its 3 x 96 and 2 x 96 maps' (6-10 us) a
# threaded one; 20x from either (decision 1259).
WOKEN_MS = 0.001
GEMM_LIKE = ("conv", "conv_pointwise", "conv_depthwise", "conv_transpose", "gemm")
# MLAS_SGEMM_THREAD_COMPLEXITY (onnxruntime/core/mlas/lib/mlasi.h): the multiplies MLAS gives one thread of a GEMM or
# convolution before it takes another; a layer with fewer runs on the calling thread alone.
MLAS_THREAD_MACS = 64 * 1024
# The hot chain's rate is at most this many times the cache probe's: beyond it the two chains' difference is noise.
HOT_CEILING = 4.0
ROWS_HALF = 32.0  # output pixels (or GEMM rows) at which a kernel reaches 1 - 1/e of its rate: a 7x7 map keeps about 0.8
# A Transpose that moves the innermost axis gathers with a stride: measured here at 2.6-5.2x the time of a copy of its
# bytes (YOLOX's head transpose, 85 x 3549 floats in its model, 128 x 3549 alone; two runs at different loads).
TRANSPOSE_STRIDED = 3.5
VECTOR_PROBE_FLOPS = 4 * CACHE_ELEMENTS  # the vector probe's work (tools/perf/host_peaks.py: probe_set)
SWISH_PROBE_FLOPS = 5 * CACHE_ELEMENTS  # the swish probe's
HALF_RANGE = (8.0, 16.0)  # what the narrow probe measured here (12-14); beyond this range a probe met other work, not channels
ROW_PIXELS_MAX = 80.0  # a depthwise row's fixed work at most this many pixels' worth: beyond it a probe met other work
NARROW_FLOOR = 0.25  # a GEMM-like kernel keeps at least this share of its rate however few channels it has


@dataclass(frozen=True)
class Cost:
    compute_ms: float
    memory_ms: float
    launch_ms: float
    serial: bool = False  # the DLA: the bytes are moved before and after the arithmetic, not under it
    threaded: bool = False  # the host: its work was split over the pool's threads, woken for it

    @property
    def ms(self) -> float:
        if self.serial:
            return self.launch_ms + self.compute_ms + self.memory_ms
        return self.launch_ms + max(self.compute_ms, self.memory_ms)

    @property
    def bound(self) -> str:
        if self.launch_ms >= max(self.compute_ms, self.memory_ms):
            return "launch"
        return "compute" if self.compute_ms >= self.memory_ms else "memory"


def channel_efficiency(channels: int, half: float) -> float:
    """What few channels leave of a GEMM-like kernel's rate: 1 - exp(-C / half)."""
    return 1.0 - math.exp(-max(channels, 1) / half)


class HostEngine:
    """ONNX Runtime on this CPU, from its measured peaks."""

    name = "cpu"

    def __init__(self, peaks: HostPeaks, block: int = 0, nchwc: frozenset[str] = frozenset(), pooled: frozenset[str] = frozenset()) -> None:
        self.peaks = peaks
        self.block = block  # ONNX Runtime's NCHWc channel block (0: none): a convolution's channels are padded to it
        self.nchwc = nchwc  # the layers that run as NCHWc kernels (tools/perf/predict.py: nchwc_kernels)
        self.pooled = pooled  # the elementwise and pooling layers ONNX Runtime splits over its threads (tools/perf/ort_threads.py)
        # The narrow probe (16 in, 16 out) pays the channel efficiency twice, once per side: each side's share is its root.
        ratio = min(max(peaks.narrow_gflops / max(peaks.pointwise_gflops, 1e-9), 0.01), 0.98)
        half = -16 / math.log(1 - math.sqrt(ratio))  # channels at which one side reaches 1 - 1/e of the rate
        self.half = min(max(half, HALF_RANGE[0]), HALF_RANGE[1])
        # A depthwise row's fixed work in pixels (decision 1261): the narrow depthwise probe's rate over the wide one's
        # is (n / (n + w0)) / (b / (b + w0)) for rows n and b pixels wide.
        narrow, wide = DEPTHWISE_NARROW_WIDTH, DEPTHWISE_WIDTH
        r = peaks.dwnarrow_gflops / peaks.depthwise_gflops if peaks.depthwise_gflops > 0 and peaks.dwnarrow_gflops > 0 else 1.0
        self.row_pixels = min(max(narrow * wide * (1 - r) / (r * wide - narrow), 0.0), ROW_PIXELS_MAX) if 1.0 > r > narrow / wide else 0.0

    def rate_gflops(self, main: Layer, threaded: bool = False, swish: bool = False) -> float:
        """`threaded`: a node on the pool's threads, whose elementwise arithmetic runs at the vector probe's rate
        without the launch the probe's own node paid (`streamed`; decision 1260). `swish`: a Sigmoid with the Mul of
        its input by it, one QuickGelu node, at the swish probe's rate."""
        p = self.peaks
        cls = main.op_class
        if cls in ("conv", "conv_pointwise", "gemm", "conv_transpose"):
            k, n = main.channels or (1, 1)
            k = k // max(main.groups, 1) * (math.prod(main.kernel) if cls != "gemm" and main.kernel else 1)
            if cls == "conv_transpose":  # its GEMM: (Cout/group x kernel) rows of Cin/group each, over the input's pixels
                k = main.channels[0] // max(main.groups, 1)
                n = (main.channels[1] // max(main.groups, 1)) * (math.prod(main.kernel) if main.kernel else 1)
                efficiency = channel_efficiency(k, self.half) * channel_efficiency(n, self.half) * channel_efficiency(_pixels(main), ROWS_HALF)
                return max(p.gemm_gflops, p.pointwise_gflops) * max(efficiency, NARROW_FLOOR)
            # A GEMM is at least as fast as the 1x1 convolution that is one (the MatMul probe is the noisier of the two).
            base = {"conv": p.conv_gflops, "conv_pointwise": p.pointwise_gflops, "gemm": max(p.gemm_gflops, p.pointwise_gflops)}[cls]
            k, n = self._padded(k), self._padded(n)  # the kernel runs on the padded channels
            efficiency = channel_efficiency(k, self.half) * channel_efficiency(n, self.half) * channel_efficiency(_rows(main), ROWS_HALF)
            if self.block and cls == "conv" and main.channels[0] < self.block and any(s > 1 for s in main.strides):
                taps = math.prod(main.kernel) if main.kernel else 9  # the first convolution of a network: NCHW input, strided
                efficiency *= min(1.0, NCHW_INPUT_STRIDED * math.sqrt(taps / 9))
            if self.block and main.groups > 1 and not nchwc_capable(main, self.block):
                efficiency *= GENERIC_CONV  # ONNX Runtime's generic convolution (im2col and a GEMM per group)
            return base * max(efficiency, NARROW_FLOOR) * self._padding(main)
        if main.op == "LRN":
            return p.lrn_gflops
        if main.op in ("MaxPool", "AveragePool", "LpPool"):
            return p.pool_gflops  # the pooling probe's rate a window element (decision 1259)
        if cls == "conv_depthwise":  # the probe is 3x3; a larger kernel does more work per byte it loads
            taps = math.prod(main.kernel) if main.kernel else 9
            return p.depthwise_gflops * min(max((taps / 9) ** 0.85, 0.3), 4.0) * self._padding(main) * self.row_share(main)
        if swish and p.swish_gflops > 0:  # x * Sigmoid(x), ONNX Runtime's QuickGelu: the swish probe (decision 1264)
            return self.streamed(p.swish_gflops, SWISH_PROBE_FLOPS) if threaded else p.swish_gflops
        return self.streamed(p.vector_gflops, VECTOR_PROBE_FLOPS) if threaded else p.vector_gflops

    def row_share(self, layer: Layer) -> float:
        """What a depthwise convolution's output rows leave of the wide probe's rate: MLAS runs its NCHWc depthwise
        kernel once a row of a channel block, so each row's fixed work (`row_pixels`, from the narrow probe) is shared
        by its pixels: (W / (W + w0)) against the probe's (80 / (80 + w0)) (decision 1261)."""
        out = layer.output_shapes[0] if layer.output_shapes else ()
        if not self.row_pixels or len(out) < 4:
            return 1.0
        width, wide = max(out[-1], 1), DEPTHWISE_WIDTH
        return (width / (width + self.row_pixels)) / (wide / (wide + self.row_pixels))

    def _padded(self, channels: int) -> int:
        return math.ceil(channels / self.block) * self.block if self.block else channels

    def _padding(self, layer: Layer) -> float:
        """The share of a blocked convolution's work that is real: its channels padded up to the NCHWc block (input
        channels fewer than a block are read as they are)."""
        if not self.block or not layer.channels or layer.op != "Conv":
            return 1.0
        c_in, c_out = layer.channels
        share = c_out / (math.ceil(c_out / self.block) * self.block)
        if c_in >= self.block and layer.op_class != "conv_depthwise":
            share *= c_in / (math.ceil(c_in / self.block) * self.block)
        return share

    @property
    def hot_gbs(self) -> float:
        """Bytes per second an elementwise node moves when the node before it has just written its input: the hot
        chain's per-node time less the launch chain's (the same nodes with nothing to move) over the bytes each of
        its nodes moves; at most HOT_CEILING times the cache probe's rate."""
        p = self.peaks
        moved = bandwidth_sizes(p.last_level_cache_bytes)["hot"]
        return moved / (max(p.node_ms - p.launch_ms, moved / (HOT_CEILING * p.cache_gbs * 1e6)) * 1e6)

    def chain_gbs(self, moved: int, node_ms: float) -> float:
        """Bytes per second a node that runs on the pool's threads moves when its input is what the node before it has
        just written: a hot chain's per-node time (`node_ms`, `moved` bytes a node) less a threaded launch, for the
        chains' nodes run on the pool (tools/perf/ort_threads.py; decision 1260); at most HOT_CEILING times the
        cache probe's rate."""
        return moved / (max(node_ms - self.threaded_launch_ms, moved / (HOT_CEILING * self.peaks.cache_gbs * 1e6)) * 1e6)

    def streamed(self, rate: float, work: float) -> float:
        """A probe's rate (GFLOP/s or GB/s over `work` FLOPs or bytes) without the threaded launch its one node paid:
        the probes of the elementwise rates run on the pool's threads (tools/perf/ort_threads.py), so their time is a
        threaded node's launch and then the streaming, and a threaded node's cost adds its launch of its own
        (decision 1260). Unchanged where the launch would be more than half the probe's time."""
        ms = work / (rate * 1e6)
        launch = self.threaded_launch_ms if self.peaks.threads > 1 else 0.0
        return work / ((ms - launch) * 1e6) if ms > 2 * launch else rate

    def bandwidth_gbs(self, moved: int, hot: bool = False, threaded: bool = False) -> float:
        """The bandwidth for `moved` bytes, from the bandwidth probes at the sizes they move: the cache probe's rate
        up to its size (`hot`: the hot chain's up to its size), DRAM's from the DRAM probe's, geometric in the size
        between two probes (through the last-level-cache probe's rate at its size). `threaded`: for a node that pays
        a threaded launch of its own, the probes' rates without theirs (`streamed`)."""
        p = self.peaks
        sizes = bandwidth_sizes(p.last_level_cache_bytes)
        rates = {name: getattr(p, f"{name}_gbs") for name in ("cache", "llc", "dram")}
        if threaded:
            rates = {name: self.streamed(rate, sizes[name]) for name, rate in rates.items()}
        first = (sizes["hot"], self.hot_gbs) if hot else (sizes["cache"], rates["cache"])
        points = [first, (sizes["llc"], rates["llc"]), (sizes["dram"], rates["dram"])]
        if hot and threaded and p.big_node_ms > 0:  # the two hot chains, their nodes on the pool, then DRAM's
            points = [(sizes["hot"], self.chain_gbs(sizes["hot"], p.node_ms)), (sizes["big"], self.chain_gbs(sizes["big"], p.big_node_ms)),
                      (sizes["dram"], rates["dram"])]  # fmt: skip
        if moved <= points[0][0]:
            return points[0][1]
        for (low, low_gbs), (high, high_gbs) in zip(points, points[1:], strict=False):
            if moved <= high:
                return low_gbs * (high_gbs / low_gbs) ** (math.log(moved / low) / math.log(high / low))
        return points[-1][1]

    def threaded(self, layer: Layer) -> bool:
        """Whether ONNX Runtime splits the layer's work over its threads: an NCHWc kernel always does (MLAS's NCHWc
        convolution and pooling take the pool's thread count, snchwc.cpp); any other convolution or GEMM only with at
        least MLAS_THREAD_MACS multiplies (MLAS gives a thread that many before it takes another; fewer run on the
        calling thread, with nothing to split or wake); an elementwise or pooling node where ONNX Runtime's own rule
        splits it (`pooled`: tools/perf/ort_threads.py, decision 1260)."""
        if layer.name in self.nchwc or layer.name in self.pooled:
            return True
        return layer.op_class in GEMM_LIKE and layer.macs >= MLAS_THREAD_MACS

    def woken(self, work_ms: float) -> bool:
        """Whether a threaded node with `work_ms` of work on one thread wakes the pool's threads: with more than
        WOKEN_MS; with less, the calling thread is done before a woken thread could start."""
        return self.peaks.threads > 1 and work_ms > WOKEN_MS

    @property
    def threaded_launch_ms(self) -> float:
        """A threaded node's launch: the parallel probe's (the launch probe's on one thread) times NODE_COST."""
        p = self.peaks
        return max((p.parallel_launch_ms if p.threads > 1 else p.launch_ms) * NODE_COST, 0.0)

    def cost(self, main: Layer, flops: int, moved: int, gated: bool = False, swish: bool = False) -> Cost:
        """A threaded node (self.threaded): the threaded launch, the bandwidth probes' rates. Any other node: the
        launch chain's per-node time, and its bytes at the hot chain's rate (its input is what the node before it has
        just written) up to the hot chain's size. `swish`: the group is a Sigmoid and the Mul of its input by it."""
        p = self.peaks
        found = self._cost(main, flops, moved, self.threaded(main), swish)
        if found.threaded and p.threads > 1 and not self.woken(p.threads * max(found.compute_ms, found.memory_ms)):
            # so little work that the calling thread finishes it before a woken thread could start (decision 1259)
            found = self._cost(main, flops, moved, False, swish)
        if not found.threaded and p.threads > 1 and not self.resize_gelems(main):
            # one thread computes at its share of the compute probes' rates: they split their work over the pool's
            # threads (decision 1260); the resize probes run on one thread themselves
            found = replace(found, compute_ms=found.compute_ms * p.threads)
        return found

    def resize_gelems(self, layer: Layer) -> float:
        """A nearest Resize that is not an NCHWc kernel runs on the calling thread: at the resize probe's rate (ONNX
        Runtime's general loop), or the nearest-2x probe's where it takes that copy (tools/perf/layers.py: _nearest2x).
        0: any other layer (decision 1262)."""
        if layer.op_class != "resize" or layer.attrs.get("mode") != "nearest" or layer.name in self.nchwc:
            return 0.0
        return self.peaks.resize2x_gelems if layer.attrs.get("nearest2x") else self.peaks.resize_gelems

    def _cost(self, main: Layer, flops: int, moved: int, threaded: bool, swish: bool = False) -> Cost:
        p = self.peaks
        # A node on the calling thread, or an elementwise node on the pool, reads what the node before it has just
        # written (decision 1200; 1260); a convolution keeps the bandwidth probes' rates.
        bandwidth = self.bandwidth_gbs(moved, hot=not threaded or main.name in self.pooled, threaded=threaded)
        if main.op_class == "gemm" and _rows(main) < 16:
            bandwidth = p.dram_gbs  # a matrix-vector product streams its weights once: DRAM's rate, whatever their size
        if strided_transpose(main):
            bandwidth /= TRANSPOSE_STRIDED
        launch = self.threaded_launch_ms if threaded else p.launch_ms
        compute = flops / (self.rate_gflops(main, threaded, swish) * 1e6) if flops else 0.0
        if rate := self.resize_gelems(main):  # its output elements on one thread, its bytes' moving included
            compute = main.output_elements / (rate * 1e6)
        if main.op_class == "conv_transpose":
            # ONNX Runtime's ConvTranspose is a GEMM into a column buffer, then col2im into the output, one after the
            # other (onnxruntime/core/providers/cpu/nn/conv_transpose.cc): the columns are written and read once, the
            # output zeroed and then added into. Those passes follow the GEMM, not under it (decision 1259).
            moved += col2im_bytes(main)
            return Cost(compute, moved / (self.bandwidth_gbs(moved) * 1e6), launch, serial=True, threaded=threaded)
        return Cost(compute, moved / (bandwidth * 1e6), launch, threaded=threaded)


def col2im_bytes(layer: Layer) -> int:
    """The bytes a ConvTranspose moves beyond its input, weights and output: its column buffer (Cout/group x kernel
    x the input's pixels, per group and image) written by the GEMM and read by col2im, the output zeroed and read
    once more as the columns are added into it, and with a bias one more pass over the output."""
    in_shape = layer.input_shapes[0] if layer.input_shapes else ()
    out = layer.output_shapes[0] if layer.output_shapes else ()
    if len(in_shape) < 3 or not layer.channels:
        return 0
    columns = (layer.channels[1] // max(layer.groups, 1)) * math.prod(layer.kernel or (1,)) * math.prod(in_shape[2:]) * layer.groups * in_shape[0]
    passes = 2 + (2 if len(layer.inputs) > 2 and layer.inputs[2] else 0)
    return 4 * (2 * columns + passes * math.prod(out))


def _pixels(layer: Layer) -> int:
    """The input's pixels of a ConvTranspose (its GEMM's columns)."""
    shape = layer.input_shapes[0] if layer.input_shapes else ()
    return math.prod(shape[2:]) * shape[0] if len(shape) > 2 else 1


def _rows(layer: Layer) -> int:
    """The M of a GEMM-like layer: output pixels of a convolution, rows of a GEMM."""
    out = layer.output_shapes[0] if layer.output_shapes else ()
    if layer.op_class == "gemm":
        return math.prod(out[:-1]) if len(out) > 1 else 1
    return math.prod(out[2:]) * out[0] if len(out) > 2 else 1


class DeviceEngine:
    """A module's GPU (TensorRT kernels) or one DLA core, from published peaks and the model's efficiencies.
    `image_inputs`: the tensors that reach a DLA core in its image format (TensorRT's kDLA_HWC4 network inputs): a
    convolution reading one runs in the DLA's image-input mode (dla_image_share)."""

    def __init__(self, peaks: EnginePeaks, precision: str, sparse: bool = False, image_inputs: frozenset[str] = frozenset()) -> None:
        self.peaks = peaks
        self.name = peaks.name
        self.precision = precision if precision in peaks.dense_tops else "fp16"  # the DLA has no FP32: FP16
        self.sparse = sparse
        self.image_inputs = image_inputs if peaks.name == "dla" else frozenset()

    def tensor_gflops(self, sparse_ok: bool = False) -> float:
        table = self.peaks.sparse_tops if self.sparse and sparse_ok else self.peaks.dense_tops
        return table[self.precision] * 1e3

    def rate_gflops(self, main: Layer, gated: bool = False) -> float:
        efficiency = GPU_EFFICIENCY if self.name == "gpu" else DLA_EFFICIENCY
        vector = GPU_VECTOR_FRACTION if self.name == "gpu" else DLA_VECTOR_FRACTION
        cls = main.op_class
        if cls not in efficiency:
            return self.peaks.dense_tops["int8" if "int8" in self.peaks.dense_tops else self.precision] * 1e3 * vector
        rate = self.tensor_gflops(sparse_ok=sparse_candidate(main, self.name, self.precision)) * efficiency[cls]
        if self.name == "gpu":
            rate *= GPU_PRECISION_EFFICIENCY["int8_gated" if gated and self.precision == "int8" else self.precision]
        else:
            rate *= dla_map_share(main)
            if main.groups > 1 and cls != "conv_depthwise":
                rate *= DLA_GROUPED
        if cls != "conv_depthwise" and main.channels:
            align = CHANNEL_ALIGN[self.precision]
            image = self.image_inputs and dla_image_mode(main, self.image_inputs)
            if image:
                rate *= dla_image_share(main)  # the input side packed by the image mode, not padded to a channel block
            for c in main.channels[1:] if image else main.channels:
                if c > 0:
                    rate *= c / (math.ceil(c / align) * align)  # the padded channels compute nothing
        return rate

    def cost(self, main: Layer, flops: int, moved: int, gated: bool = False, swish: bool = False) -> Cost:
        """`gated`: the group's epilogue is a gate (a Sigmoid, Tanh, ...), which INT8 kernels run slower. `swish`:
        unused (TensorRT runs a Swish's Sigmoid and Mul in one kernel, costed by their FLOPs)."""
        compute = flops / (self.rate_gflops(main, gated) * 1e6) if flops else 0.0
        if self.name == "gpu":
            return Cost(compute, moved / (self.peaks.memory_gbs * GPU_BANDWIDTH_EFFICIENCY * 1e6), GPU_LAUNCH_MS)
        memory = moved / (self.peaks.memory_gbs * DLA_BANDWIDTH_EFFICIENCY * 1e6)
        return Cost(compute, memory, DLA_LAYER_MS, serial=True)


def dla_map_share(layer: Layer) -> float:
    """What a small output map leaves of a DLA convolution's rate: 1 - exp(-pixels per image / DLA_ROWS_HALF)."""
    out = layer.output_shapes[0] if layer.output_shapes else ()
    if not DLA_ROWS_HALF or len(out) < 3:
        return 1.0
    return 1.0 - math.exp(-math.prod(out[2:]) / DLA_ROWS_HALF)


# The DLA's image-input mode (NVDLA Unit Description, "Convolution with Image Input" and "Channel Post-Extension";
# decision 1140). A convolution whose input is an image in the DLA's pixel format (TensorRT's kDLA_HWC4 input format:
# 1 channel as grayscale, 3 or 4 as a colour image, stored with 4) is fed with each kernel row's S x C pixel elements
# packed as its channels (pre-extension) and, where the packed row is short enough, 2 or 4 kernel rows in one atomic
# operation (post-extension: 4 rows for at most 16 elements and stride x channels <= 16, 2 rows for at most 32 and
# <= 32). An atomic operation takes DLA_ATOMIC_C input elements, so a 7x7 stride-2 convolution of 3 channels keeps
# 147 of 256 MAC slots busy (0.57), a 3x3 one 27 of 64 (0.42); a feature-mode convolution of 3 channels keeps 3 of a
# channel block. The atomic size is the published NVDLA v1 design's: Orin's DLA sizes are not published.
DLA_ATOMIC_C = 64
DLA_IMAGE_CHANNELS = 4  # the image formats' stored channels (3 are padded to 4); 1 for grayscale


def dla_image_mode(layer: Layer, image_inputs: frozenset[str]) -> bool:
    """The DLA runs this convolution in its image-input mode: a dense 2-D convolution (no dilation, one group) of at
    most 4 channels reading a tensor that arrives in the DLA's image format (Winograd, deconvolution and dilation
    cannot use pixel formats)."""
    if layer.op != "Conv" or layer.groups != 1 or len(layer.kernel) != 2 or not layer.channels or not layer.inputs:
        return False
    if any(d != 1 for d in layer.attrs.get("dilations", ())):
        return False
    return layer.inputs[0] in image_inputs and 0 < layer.channels[0] <= DLA_IMAGE_CHANNELS


def dla_image_share(layer: Layer) -> float:
    """The share of the DLA's MAC slots an image-input convolution keeps busy: its R x S x C products against the
    atomic operations its pre- and post-extended rows take (ceil(R / rows) of DLA_ATOMIC_C elements each)."""
    c = layer.channels[0]
    r, s = layer.kernel
    stride = layer.strides[-1] if layer.strides else 1
    stored = 1 if c == 1 else DLA_IMAGE_CHANNELS
    packed = s * stored  # one kernel row's elements after pre-extension
    rows = 4 if packed <= 16 and stride * stored <= 16 else 2 if packed <= 32 and stride * stored <= 32 else 1
    slots = math.ceil(r / rows) * math.ceil(packed * rows / DLA_ATOMIC_C) * DLA_ATOMIC_C
    return min(1.0, r * s * c / slots)


# DLA structured sparsity (decision 1012, re-checked in decision 1018). NVIDIA's DLA FAQ (Deep-Learning-Accelerator-SW,
# "What's the difference between Dense TOPs and Sparse TOPS?"): 2:4 along C of a KCRS convolution weight, "for DLA,
# you will need C > 64". Every sparse DLA figure NVIDIA publishes is INT8 (the DLA-SW README's sparse INT8 peaks and
# its 2:4 measurements, all with --int8), so FP16 is not costed sparse. The Developer Guide's section ("Customizing DLA
# Memory Pools and Structured Sparsity") could not be read back; the rule K % 64 in {0, 1, 2, 4, 8, 16, 32} is kept
# as the earlier reading gave it, unconfirmed. A limit of 256K quantized weights is not applied: the DLA-SW README says
# the listed restrictions "may not apply anymore to most recent DLA releases", and its measured 1.31-1.47x sparse
# speed-ups of ResNet-34 networks (JetPack 5.1.1) come from 3x3 layers of 256 and 512 channels (590K-2.4M weights).
DLA_SPARSE_MIN_CHANNELS = 64  # input channels must exceed this
DLA_SPARSE_K_REMAINDERS = {0, 1, 2, 4, 8, 16, 32}  # K % 64 (unconfirmed, see above)


def sparse_candidate(layer: Layer, engine: str, precision: str = "int8") -> bool:
    """2:4 sparsity can speed this layer up: a dense convolution or GEMM whose weights TensorRT can prune 2:4. On the
    DLA: INT8 2-D convolutions meeting every documented rule (dla_sparse_reason); on the GPU: wide layers (about 256
    channels and up), where TensorRT's sparse kernels win (DESIGN "2:4 sparsity" and the sources it names)."""
    if engine == "dla":
        return dla_sparse_reason(layer, precision) is None
    if layer.op_class not in ("conv", "conv_pointwise", "gemm") or not layer.channels or layer.groups != 1:
        return False
    c_in, c_out = layer.channels
    return min(c_in, c_out) >= 256


def dla_sparse_reason(layer: Layer, precision: str) -> str | None:
    """Why the DLA runs this layer dense (None: structured sparsity applies), from the documented rules above."""
    if precision != "int8":
        return f"DLA structured sparsity is INT8 only, not {precision.upper()}"
    if layer.op != "Conv" or layer.op_class not in ("conv", "conv_pointwise") or layer.groups != 1 or len(layer.kernel) != 2:
        return "DLA structured sparsity applies to dense 2-D convolutions only"
    c_in, c_out = layer.channels or (0, 0)
    if c_in <= DLA_SPARSE_MIN_CHANNELS:
        return f"{c_in} input channels: DLA structured sparsity needs more than {DLA_SPARSE_MIN_CHANNELS}"
    if c_out % 64 not in DLA_SPARSE_K_REMAINDERS:
        return f"{c_out} output channels: DLA structured sparsity needs K % 64 in {sorted(DLA_SPARSE_K_REMAINDERS)}"
    return None
