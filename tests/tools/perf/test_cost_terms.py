"""Each cost term the calibration against published figures added, on hand-built layers: the DLA's per-layer fixed
cost, its depthwise and small-map efficiency, its memory time beside the arithmetic, its sub-linear clock dependence;
the GPU's per-precision efficiency; the host's MaxPool window rate and strided Transpose; and the published table
itself (it loads, every row names its source)."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import pytest

from tests.tools.perf.peaks import FIXED
from tools.perf import engines, host_peaks
from tools.perf.engines import DeviceEngine, HostEngine
from tools.perf.layers import Layer, layers_of, strided_transpose
from tools.perf.platforms import machine
from tools.perf.predict import predict_host
from tools.perf.published import SPLITS, published_table


def _conv(c_in: int, c_out: int, size: int, kernel: int = 3, groups: int = 1, op_class: str = "conv") -> Layer:
    out = (1, c_out, size, size)
    macs = c_out * size * size * (c_in // groups) * kernel * kernel
    return Layer(index=0, name="c", op="Conv", op_class=op_class, inputs=("a",), outputs=("b",), input_shapes=((1, c_in, size, size),),
                 output_shapes=(out,), macs=macs, flops=2 * macs, weight_elements=c_out * (c_in // groups) * kernel * kernel,
                 input_elements=c_in * size * size, output_elements=math.prod(out), channels=(c_in, c_out), kernel=(kernel, kernel),
                 groups=groups, strides=(1, 1))  # fmt: skip


def _dla(mode: str = "MAXN") -> DeviceEngine:
    return DeviceEngine(machine("jetson-agx-orin-64gb", mode).dla, "int8")


def test_dla_layer_pays_a_fixed_cost_and_its_bytes_beside_the_arithmetic():
    layer = _conv(64, 64, 56)
    cost = _dla().cost(layer, layer.flops, 1_000_000)
    assert cost.launch_ms == engines.DLA_LAYER_MS > 0
    assert cost.memory_ms > 0 and cost.compute_ms > 0
    assert cost.ms == pytest.approx(cost.launch_ms + cost.compute_ms + cost.memory_ms)  # not the larger of the two
    empty = _dla().cost(layer, 0, 0)
    assert empty.ms == pytest.approx(engines.DLA_LAYER_MS)  # a layer with nothing to do still costs its fixed part


def test_dla_clock_shortens_the_arithmetic_only():
    layer = _conv(256, 256, 28)
    fast, slow = _dla("MAXN").cost(layer, layer.flops, 2_000_000), _dla("MODE_15W").cost(layer, layer.flops, 2_000_000)
    peaks = slow.compute_ms / fast.compute_ms
    assert peaks == pytest.approx(105 / 40)  # the modes' published DLA peaks (2 DLAs: 105 and 40 sparse TOPS)
    assert slow.memory_ms == pytest.approx(fast.memory_ms) and slow.launch_ms == fast.launch_ms
    assert 1 < slow.ms / fast.ms < peaks  # sub-linear: the fixed cost and the bytes do not follow the clock


def test_dla_depthwise_and_small_maps_run_below_the_dense_rate():
    dla = _dla()
    dense = dla.rate_gflops(_conv(128, 128, 64))
    depthwise = dla.rate_gflops(_conv(128, 128, 64, groups=128, op_class="conv_depthwise"))
    assert depthwise / dense == pytest.approx(engines.DLA_EFFICIENCY["conv_depthwise"] / engines.DLA_EFFICIENCY["conv"])
    small, large = dla.rate_gflops(_conv(128, 128, 4)), dla.rate_gflops(_conv(128, 128, 64))
    assert small / large == pytest.approx(dense_share(4) / dense_share(64))
    assert small < large
    grouped = dla.rate_gflops(_conv(128, 128, 64, groups=32))
    assert grouped == pytest.approx(dense * engines.DLA_GROUPED)


def dense_share(size: int) -> float:
    return 1 - math.exp(-size * size / engines.DLA_ROWS_HALF) if engines.DLA_ROWS_HALF else 1.0


def test_gpu_precisions_reach_their_own_share_of_their_peak():
    target = machine("jetson-agx-orin-64gb", "MAXN").gpu
    layer = _conv(128, 128, 80)
    fp16, int8 = DeviceEngine(target, "fp16").rate_gflops(layer), DeviceEngine(target, "int8").rate_gflops(layer)
    assert int8 / fp16 == pytest.approx(2 * engines.GPU_PRECISION_EFFICIENCY["int8"])  # the doubled peak, not all of it
    fp32 = DeviceEngine(target, "fp32").rate_gflops(layer)
    assert fp32 / fp16 == pytest.approx(0.5 * engines.GPU_PRECISION_EFFICIENCY["fp32"])  # TF32


def _layer(op: str, op_class: str, shape: tuple, flops: int = 0, kernel: tuple = (), attrs: dict | None = None) -> Layer:
    n = math.prod(shape)
    return Layer(index=0, name=op.lower(), op=op, op_class=op_class, inputs=("a",), outputs=("b",), input_shapes=(shape,),
                 output_shapes=(shape,), macs=0, flops=flops, weight_elements=0, input_elements=n, output_elements=n, kernel=kernel,
                 attrs=attrs or {})  # fmt: skip


def test_host_pooling_runs_at_the_pooling_probes_rate():
    """A window element costs what the pooling probe measured, whatever the kernel: not the vector probe's rate (their
    ratio differs between CPUs, decision 1259)."""
    host = HostEngine(FIXED)
    for op, kernel in (("MaxPool", (13, 13)), ("MaxPool", (3, 3)), ("AveragePool", (5, 5))):
        pool = _layer(op, "pool", (1, 128, 13, 13), flops=128 * 169 * math.prod(kernel), kernel=kernel)
        assert host.rate_gflops(pool) == FIXED.pool_gflops
    slower = HostEngine(replace(FIXED, pool_gflops=FIXED.pool_gflops / 2))
    pool = _layer("MaxPool", "pool", (1, 128, 13, 13), flops=128 * 169 * 169, kernel=(13, 13))
    moved = 2 * 4 * 128 * 169
    assert slower.cost(pool, pool.flops, moved).compute_ms == pytest.approx(2 * host.cost(pool, pool.flops, moved).compute_ms)
    sigmoid = _layer("Sigmoid", "elementwise", (1, 128, 13, 13), flops=4 * 128 * 169)
    assert host.rate_gflops(sigmoid) == FIXED.vector_gflops


def test_host_swish_runs_at_the_swish_probes_rate():
    """A Sigmoid with the Mul of its input by it (its group's 5 FLOPs an element) is one QuickGelu node in ONNX Runtime:
    the swish probe's rate; a Sigmoid alone keeps the vector probe's; without the probe, the vector probe's (decision
    1264)."""
    host = HostEngine(FIXED)
    sigmoid = _layer("Sigmoid", "elementwise", (1, 16, 8, 8), flops=4 * 1024)
    moved = 2 * 4 * 1024
    alone, swish = host.cost(sigmoid, sigmoid.flops, moved), host.cost(sigmoid, 5 * 1024, moved, swish=True)
    assert swish.compute_ms / alone.compute_ms == pytest.approx((5 / FIXED.swish_gflops) / (4 / FIXED.vector_gflops))
    assert host.cost(sigmoid, 5 * 1024, moved).compute_ms == pytest.approx(alone.compute_ms * 5 / 4)  # not said to be one
    unprobed = HostEngine(replace(FIXED, swish_gflops=0.0))
    assert unprobed.cost(sigmoid, 5 * 1024, moved, swish=True).compute_ms == pytest.approx(alone.compute_ms * 5 / 4)
    model = layers_of(onnx.shape_inference.infer_shapes(onnx.load_from_string(host_peaks._swish(1 << 16))))
    (base,), (faster,), (vector,) = (predict_host(model, replace(FIXED, swish_gflops=rate), block=0).layers for rate in (7.0, 14.0, 0.0))
    assert len(base.members) == 2  # one group, as ONNX Runtime runs one node
    assert faster.compute_ms < 0.75 * base.compute_ms  # the prediction takes the swish probe's rate
    assert vector.compute_ms < base.compute_ms  # FIXED's swish probe: slower than the vector probe's rate says


def test_the_swish_probe_is_one_quickgelu_node_of_onnx_runtime(tmp_path):
    import onnxruntime as ort

    model, feeds, work = host_peaks.probe_set(32 << 20, ("swish",))["swish"]
    options = ort.SessionOptions()
    options.enable_profiling, options.profile_file_prefix = True, str(tmp_path / "swish")
    session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    (y,) = session.run(None, feeds)
    x = feeds["x"]
    assert np.allclose(y, x / (1 + np.exp(-x)), atol=1e-5) and work == 5 * x.size
    ran = {e["args"]["op_name"] for e in json.loads(Path(session.end_profiling()).read_text()) if e.get("cat") == "Node"}
    assert ran == {"QuickGelu"}


def test_host_transpose_of_the_innermost_axis_is_a_strided_gather():
    host = HostEngine(FIXED)
    moved = 2 * 4 * 128 * 3549
    rows = _layer("Transpose", "movement", (1, 8, 128, 3549), attrs={"perm": (0, 2, 1, 3)})  # whole rows move
    gather = _layer("Transpose", "movement", (1, 128, 3549), attrs={"perm": (0, 2, 1)})
    assert host.cost(gather, 0, moved).memory_ms == pytest.approx(host.cost(rows, 0, moved).memory_ms * engines.TRANSPOSE_STRIDED)
    reversed_axes = _layer("Transpose", "movement", (128, 3549))  # no perm: the axes reversed
    assert strided_transpose(reversed_axes) and not strided_transpose(rows)


def test_host_nearest_resize_runs_on_one_thread_at_its_probes_rate():
    """ONNX Runtime's nearest Resize runs on the calling thread: its general loop at the resize probe's rate, its 2x
    copy at the 2x probe's, neither divided among the pool's threads (both probes run on one thread); an NCHWc
    Resize and a linear one keep their costs (decision 1262)."""
    host = HostEngine(FIXED)
    general = replace(_layer("Resize", "resize", (1, 24, 160, 160), attrs={"mode": "nearest", "nearest2x": False}), name="by4")
    copy = replace(general, name="by2", attrs={"mode": "nearest", "nearest2x": True})
    moved = 4 * (24 * 40 * 40 + general.output_elements)
    by4, by2 = host.cost(general, 0, moved), host.cost(copy, 0, moved)
    assert by4.compute_ms == pytest.approx(general.output_elements / (FIXED.resize_gelems * 1e6)) and not by4.threaded
    assert by2.compute_ms == pytest.approx(general.output_elements / (FIXED.resize2x_gelems * 1e6)) and not by2.threaded
    assert by4.launch_ms == FIXED.launch_ms and by4.bound == "compute"
    blocked = HostEngine(FIXED, 8, frozenset({"by4"}))  # an NCHWc Upsample: MLAS's kernel on the pool
    assert blocked.cost(general, 0, moved).compute_ms == 0.0 and blocked.cost(general, 0, moved).threaded
    linear = replace(general, attrs={"mode": "linear"}, flops=8 * general.output_elements)
    assert host.cost(linear, linear.flops, moved).compute_ms == pytest.approx(2 * linear.flops / (FIXED.vector_gflops * 1e6))
    unmeasured = HostEngine(replace(FIXED, resize_gelems=0.0))  # a cache without the probe: the bytes alone, as before
    assert unmeasured.cost(general, 0, moved).compute_ms == 0.0


def test_the_published_table_loads_and_every_row_names_its_source():
    sources, rows = published_table()
    assert len(rows) >= 40
    for row in rows:
        source = sources[row.source]
        assert source["url"].startswith("https://") and source["title"] and "read_at" in source
        assert row.split in SPLITS and row.ms > 0 and row.published > 0
        assert row.derived or row.unit.startswith("ms"), row.id  # a throughput says how it became a latency
    assert {r.split for r in rows} == set(SPLITS)
    assert {r.engine for r in rows if r.split == "held_out"} == {"gpu", "dla"}  # both engines are checked on rows not fitted


def test_host_conv_transpose_is_its_gemm_then_col2im():
    """ONNX Runtime's ConvTranspose (conv_transpose.cc): a GEMM of (Cout x kernel) rows of Cin each over the input's
    pixels into a column buffer, then col2im into the zeroed output, one after the other."""
    c_in, c_out, h, w = 24, 24, 160, 160
    up = Layer(index=0, name="up", op="ConvTranspose", op_class="conv_transpose", inputs=("a", "w"), outputs=("b",),
               input_shapes=((1, c_in, h, w),), output_shapes=((1, c_out, 2 * h, 2 * w),), macs=c_in * c_out * 4 * h * w,
               flops=2 * c_in * c_out * 4 * h * w, weight_elements=c_in * c_out * 4, input_elements=c_in * h * w,
               output_elements=c_out * 4 * h * w, channels=(c_in, c_out), kernel=(2, 2), strides=(2, 2))  # fmt: skip
    columns = c_out * 4 * h * w
    assert engines.col2im_bytes(up) == 4 * (2 * columns + 2 * c_out * 4 * h * w)
    biased = replace(up, inputs=("a", "w", "bias"))
    assert engines.col2im_bytes(biased) == engines.col2im_bytes(up) + 4 * 2 * c_out * 4 * h * w  # one more pass to add the bias
    host = HostEngine(FIXED, 8)
    gemm = engines.channel_efficiency(c_in, host.half) * engines.channel_efficiency(c_out * 4, host.half)
    gemm *= engines.channel_efficiency(h * w, engines.ROWS_HALF)
    assert host.rate_gflops(up) == pytest.approx(max(FIXED.gemm_gflops, FIXED.pointwise_gflops) * gemm)
    moved = 4 * (c_in * h * w + c_out * 4 * h * w)
    cost = host.cost(up, up.flops, moved)
    total = moved + engines.col2im_bytes(up)
    assert cost.serial and cost.memory_ms == pytest.approx(total / (host.bandwidth_gbs(total) * 1e6))
    assert cost.ms == pytest.approx(cost.launch_ms + cost.compute_ms + cost.memory_ms)


def test_host_depthwise_rows_share_a_fixed_cost_read_off_the_narrow_depthwise_probe():
    """MLAS runs its NCHWc depthwise kernel once a row of a channel block: rows W pixels wide run at
    (W / (W + w0)) / (80 / (80 + w0)) of the wide probe's rate, w0 from the narrow probe (rows 10 wide; decision 1261)."""
    host = HostEngine(FIXED)
    ratio = FIXED.dwnarrow_gflops / FIXED.depthwise_gflops  # 0.5 in the fixed peaks
    assert host.row_pixels == pytest.approx(10 * 80 * (1 - ratio) / (80 * ratio - 10))
    wide, narrow, tiny = (_conv(128, 128, size, groups=128, op_class="conv_depthwise") for size in (80, 10, 2))
    assert host.rate_gflops(wide) == pytest.approx(FIXED.depthwise_gflops * host._padding(wide))
    assert host.rate_gflops(narrow) == pytest.approx(FIXED.dwnarrow_gflops * host._padding(narrow))  # the narrow probe itself
    assert host.rate_gflops(tiny) < host.rate_gflops(narrow) / 3
    flat = HostEngine(replace(FIXED, dwnarrow_gflops=FIXED.depthwise_gflops))  # no fixed cost a row: every width alike
    assert flat.row_pixels == 0 and flat.rate_gflops(tiny) == pytest.approx(flat.rate_gflops(wide))
