"""The host's small nodes costed from the two chains of distinct elementwise nodes (decision 1200): a node that is not
a convolution or GEMM pays the launch chain's per-node time (no NODE_COST) and moves its bytes at the hot chain's rate;
the time after such a node is the launch chain's (growing with its bytes: test_between_nodes.py); an NCHWc reorder is such
a node unless its pass is long enough to wake the threads; a convolution keeps the parallel probe's terms where MLAS
splits it over the threads. Hand-built layers and graphs, fixed peaks; the probe chain itself is built and run once by
ONNX Runtime; an old cache is measured again."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, replace

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.tools.perf.peaks import FIXED
from tools.perf import host_peaks as hp
from tools.perf.engines import MLAS_THREAD_MACS, NODE_COST, WOKEN_MS, HostEngine
from tools.perf.host_runs import plain_node_ms
from tools.perf.host_speed import host_speed
from tools.perf.layers import Layer, layers_of
from tools.perf.predict import predict_host

HOT = 8 * hp.HOT_ELEMENTS  # bytes each node of the hot chain moves
WORK = 10**6  # FLOPs enough for a threaded node to wake the threads (about 0.01 ms at the fixed peaks' rates)


def _elementwise(op: str, elements: int) -> Layer:
    shape = (1, elements)
    return Layer(index=0, name=op.lower(), op=op, op_class="elementwise", inputs=("a",), outputs=("b",), input_shapes=(shape,),
                 output_shapes=(shape,), macs=0, flops=elements, weight_elements=0, input_elements=elements, output_elements=elements)  # fmt: skip


def _pointwise(elements: int) -> Layer:
    side = int(math.sqrt(elements // 64))
    return Layer(index=0, name="conv", op="Conv", op_class="conv_pointwise", inputs=("a",), outputs=("b",),
                 input_shapes=((1, 64, side, side),), output_shapes=((1, 64, side, side),), macs=64 * 64 * side * side,
                 flops=2 * 64 * 64 * side * side, weight_elements=64 * 64, input_elements=64 * side * side,
                 output_elements=64 * side * side, channels=(64, 64), kernel=(1, 1))  # fmt: skip


def test_the_hot_chain_sets_an_elementwise_nodes_bandwidth_and_a_convolution_keeps_the_cache_probes():
    engine = HostEngine(FIXED)
    hot = HOT / ((FIXED.node_ms - FIXED.launch_ms) * 1e6)  # 2 MiB in 20 us: 105 GB/s
    assert engine.hot_gbs == pytest.approx(hot) and hot > 2 * FIXED.cache_gbs
    moved = HOT // 2  # within the hot chain's size
    add = engine.cost(_elementwise("Add", moved // 8), moved // 8, moved)
    assert add.memory_ms == pytest.approx(moved / (hot * 1e6))
    conv = engine.cost(_pointwise(moved // 8), 0, moved)  # no arithmetic: its bytes alone
    # A threaded node streams at the cache probe's rate without the threaded launch the probe's node paid (decision 1260).
    cache = hp.bandwidth_sizes(FIXED.last_level_cache_bytes)["cache"]
    streamed = cache / ((cache / (FIXED.cache_gbs * 1e6) - engine.threaded_launch_ms) * 1e6)
    assert conv.memory_ms == pytest.approx(moved / (streamed * 1e6)) and streamed > FIXED.cache_gbs
    # Beyond the hot chain's size the rate falls towards the last-level-cache probe's, as the cache probe's curve does.
    assert FIXED.llc_gbs < engine.bandwidth_gbs(8 * HOT, hot=True) < hot
    assert engine.bandwidth_gbs(FIXED.last_level_cache_bytes, hot=True) == pytest.approx(FIXED.llc_gbs)


def test_a_hot_chain_no_slower_than_its_launch_is_held_to_a_ceiling():
    engine = HostEngine(replace(FIXED, node_ms=FIXED.launch_ms))  # a noisy measurement: nothing left for the bytes
    assert engine.hot_gbs == pytest.approx(4.0 * FIXED.cache_gbs)  # HOT_CEILING times the cache probe's rate, not infinite


def test_an_elementwise_node_pays_the_launch_chain_once_and_a_convolution_the_parallel_probe_times_node_cost():
    engine = HostEngine(FIXED)
    assert engine.cost(_elementwise("Mul", 16), 16, 128).launch_ms == pytest.approx(FIXED.launch_ms)
    assert engine.cost(_pointwise(64 * 16), WORK, 128).launch_ms == pytest.approx(FIXED.parallel_launch_ms * NODE_COST)
    single = HostEngine(replace(FIXED, threads=1))
    assert single.cost(_pointwise(64 * 16), WORK, 128).launch_ms == pytest.approx(FIXED.launch_ms * NODE_COST)


def _conv_mul_add():
    """x -> Conv 1x1 (8 channels) -> Mul by a constant -> Add of a constant: one threaded node and two that are not."""
    weights = [numpy_helper.from_array(np.ones((8, 8, 1, 1), np.float32), "w"), numpy_helper.from_array(np.ones((1, 8, 1, 1), np.float32), "k")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"), helper.make_node("Mul", ["k", "c"], ["m"], name="mul"),
             helper.make_node("Add", ["m", "k"], ["y"], name="add")]  # fmt: skip
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 32, 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 32, 32])], weights)  # fmt: skip
    return layers_of(onnx.shape_inference.infer_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])))


ACTIVATIONS = 2 * 4 * 8 * 32 * 32  # each node of _conv_mul_add reads and writes an 8 x 32 x 32 tensor


def _after(moved: int, threaded: bool, peaks=FIXED) -> float:
    """The time after a node of `moved` bytes below the hot chain's, written out (decision 1264)."""
    return (peaks.parallel_gap_ms if threaded else peaks.gap_ms) + (peaks.node_gap_ms - peaks.parallel_gap_ms) * moved / HOT


def test_the_time_between_nodes_is_the_launch_chains_after_an_elementwise_node_and_the_parallel_chains_after_a_threaded_one():
    model = _conv_mul_add()
    prediction = predict_host(model, FIXED, block=0)
    assert [p.members for p in prediction.layers] == [("conv",), ("mul",), ("add",)]  # Mul(k, x) does not fold (decision 1142)
    assert prediction.run_overhead_ms == pytest.approx(2 * _after(ACTIVATIONS, False) + _after(ACTIVATIONS, True))
    slower = predict_host(model, replace(FIXED, gap_ms=2 * FIXED.gap_ms), block=0)
    assert slower.run_overhead_ms - prediction.run_overhead_ms == pytest.approx(2 * FIXED.gap_ms)


def test_a_reorder_is_costed_as_a_node_of_the_chains():
    model = _conv_mul_add()  # blocked by 8: its NCHW input is reordered in, its output out for the Mul (a constant operand)
    prediction = predict_host(model, FIXED, block=8)
    moved = 2 * 4 * 8 * 32 * 32  # each reorder reads and writes the 8 x 32 x 32 tensor once
    one = FIXED.launch_ms + moved / (HostEngine(FIXED, 8).bandwidth_gbs(moved, hot=True) * 1e6)
    conv = prediction.layers[0]
    assert conv.reorder_ms == pytest.approx(2 * one)  # no NODE_COST, and its bytes at the hot chain's rate
    assert prediction.run_overhead_ms == pytest.approx((2 + 2) * _after(moved, False) + _after(ACTIVATIONS, True))  # two nodes, two reorders


def test_the_probe_chains_are_distinct_elementwise_nodes_that_onnx_runtime_runs():
    import onnxruntime as ort

    model = onnx.load_from_string(hp._chain(8, 16))
    assert [n.op_type for n in model.graph.node][:4] == list(hp.CHAIN_OPS) and len(model.graph.node) == 8
    assert len({n.output[0] for n in model.graph.node}) == 8  # each node writes a tensor of its own
    constants = [i.name for i in model.graph.initializer]
    assert len(constants) == len(set(constants)) == 10  # its own constant each (a Clip has two)
    x = np.full(16, 100.0, np.float32)
    (y,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"t0": x})
    assert np.all(np.isfinite(y)) and np.all(np.abs(y) <= 7.0)  # the clip holds the values however long the chain
    probes = hp.probe_set(32 << 20, ("chain", "nodes", "bignodes"))
    assert probes["nodes"][1]["t0"].size == hp.HOT_ELEMENTS and probes["chain"][1]["t0"].size == 16
    assert probes["bignodes"][1]["t0"].size == hp.BIG_ELEMENTS and probes["bignodes"][2] == hp.BIG_CHAIN
    assert hp.probe_values("nodes", 32, 3.2, 0.32) == {"node_ms": pytest.approx(0.1), "node_gap_ms": pytest.approx(0.01)}
    assert hp.probe_values("bignodes", 8, 2.4, 0.1) == {"big_node_ms": pytest.approx(0.3), "big_gap_ms": pytest.approx(0.0125)}


def test_the_profile_scales_the_hot_chain_by_its_own_probe():
    work = 32
    raw = {"nodes": {"work": work, "unit": "node", "burst": 3, "kernel_ms": [2 * FIXED.node_ms * work] * 3,
                     "between_ms": [2 * FIXED.node_gap_ms * work] * 3}}  # fmt: skip
    speed = host_speed(FIXED, {"format": 1, "probes": raw})
    ran = speed.scale(FIXED)
    assert speed.factors["nodes"] == pytest.approx(0.5)
    assert ran.node_ms == pytest.approx(2 * FIXED.node_ms) and ran.node_gap_ms == pytest.approx(2 * FIXED.node_gap_ms)
    assert ran.big_node_ms == pytest.approx(2 * FIXED.big_node_ms)  # the big hot chain follows it: half the speed, twice the time


def test_a_cache_of_the_previous_format_is_measured_again_not_misread(tmp_path, monkeypatch):
    path, key = hp.peaks_path(2, False, tmp_path)
    old = {k: v for k, v in asdict(FIXED).items() if k not in ("node_ms", "node_gap_ms")}  # format 9 had no hot chain
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"key": json.loads(key), "peaks": old}))
    measured = []
    monkeypatch.setattr(hp, "measure_peaks", lambda *args, **kwargs: measured.append(args) or FIXED)
    assert hp.host_peaks(2, False, tmp_path) == FIXED and len(measured) == 1
    assert json.loads(path.read_text())["peaks"] == asdict(FIXED)  # stored in the new format
    assert json.loads(key)[0] == hp.PEAKS_FORMAT == 15  # and an older format's file sits under another key altogether


def test_a_convolution_of_few_multiplies_runs_on_the_calling_thread_an_nchwc_kernel_never_does():
    """MLAS gives a thread MLAS_THREAD_MACS multiplies before it takes another; its NCHWc kernels take every thread."""
    small = replace(_pointwise(64 * 4), macs=MLAS_THREAD_MACS - 1)
    large = replace(small, macs=MLAS_THREAD_MACS)
    engine = HostEngine(FIXED, 8)
    assert engine.cost(small, WORK, 128).launch_ms == pytest.approx(FIXED.launch_ms)
    assert engine.cost(large, WORK, 128).launch_ms == pytest.approx(FIXED.parallel_launch_ms * NODE_COST)
    blocked = HostEngine(FIXED, 8, frozenset({small.name}))
    assert blocked.cost(small, WORK, 128).launch_ms == pytest.approx(FIXED.parallel_launch_ms * NODE_COST)


def test_a_threaded_node_of_too_little_work_to_wake_the_threads_costs_a_plain_node():
    """Its work on one thread at most WOKEN_MS: the calling thread is done before a woken thread could start."""
    engine = HostEngine(FIXED, 8)
    layer = _pointwise(64 * 16)
    little = int(WOKEN_MS / 2 * engine.rate_gflops(layer) * 1e6 / FIXED.threads)  # half the threshold on one thread
    alone = engine.cost(layer, little, 128)
    assert not alone.threaded and alone.launch_ms == pytest.approx(FIXED.launch_ms)
    assert alone.compute_ms == pytest.approx(FIXED.threads * little / (engine.rate_gflops(layer) * 1e6))  # on one thread
    woken = engine.cost(layer, 4 * little, 128)
    assert woken.threaded and woken.launch_ms == pytest.approx(FIXED.parallel_launch_ms * NODE_COST)


def test_a_reorder_with_work_enough_wakes_the_threads():
    """A reorder's pass longer than WOKEN_MS pays a threaded node's launch and its gap; a shorter one a node's."""
    small = predict_host(_conv_mul_add(), FIXED, block=8)
    slow = replace(FIXED, node_ms=FIXED.launch_ms + (FIXED.node_ms - FIXED.launch_ms) * 8)  # the hot chain 8x slower
    woken = predict_host(_conv_mul_add(), slow, block=8)
    moved = 2 * 4 * 8 * 32 * 32
    engine = HostEngine(slow, 8)
    work = moved / (engine.bandwidth_gbs(moved, hot=True) * 1e6)
    assert work > WOKEN_MS > moved / (HostEngine(FIXED, 8).bandwidth_gbs(moved, hot=True) * 1e6)
    assert woken.layers[0].reorder_ms == pytest.approx(2 * (engine.threaded_launch_ms + work))
    assert small.run_overhead_ms == pytest.approx(4 * _after(moved, False) + _after(ACTIVATIONS, True))
    assert woken.run_overhead_ms == pytest.approx(2 * _after(moved, False) + 3 * _after(moved, True))


def test_a_node_on_the_calling_thread_computes_at_one_threads_share_of_the_probes_rate():
    """The compute probes split their work over the pool's threads: a node ONNX Runtime runs on the calling thread
    alone (a GEMM of few multiplies, an elementwise node below its threshold) gets one thread's share (decision 1260)."""
    engine = HostEngine(FIXED, 8)
    small = replace(_pointwise(64 * 4), macs=MLAS_THREAD_MACS - 1)
    flops = 10**7  # work enough to wake the threads, were it split
    assert engine.cost(small, flops, 128).compute_ms == pytest.approx(FIXED.threads * flops / (engine.rate_gflops(small) * 1e6))
    sigmoid = _elementwise("Sigmoid", 4096)
    assert engine.cost(sigmoid, flops, 128).compute_ms == pytest.approx(FIXED.threads * flops / (FIXED.vector_gflops * 1e6))
    single = HostEngine(replace(FIXED, threads=1), 8)
    assert single.cost(sigmoid, flops, 128).compute_ms == pytest.approx(flops / (FIXED.vector_gflops * 1e6))


def test_an_elementwise_node_onnx_runtime_splits_pays_a_threaded_launch_and_streams_without_the_probes_launch():
    """`pooled` (tools/perf/ort_threads.py): the threaded launch, the vector and bandwidth probes' rates less the
    threaded launch their own node paid (decision 1260)."""
    sigmoid = _elementwise("Sigmoid", 1 << 20)
    plain = HostEngine(FIXED, 8).cost(sigmoid, 4 << 20, 8 << 20)
    split = HostEngine(FIXED, 8, pooled=frozenset({sigmoid.name})).cost(sigmoid, 4 << 20, 8 << 20)
    engine = HostEngine(FIXED, 8)
    assert split.threaded and not plain.threaded
    assert split.launch_ms == pytest.approx(engine.threaded_launch_ms) and plain.launch_ms == pytest.approx(FIXED.launch_ms)
    probe_ms = 4 * hp.CACHE_ELEMENTS / (FIXED.vector_gflops * 1e6)
    assert split.compute_ms == pytest.approx((4 << 20) / (4 * hp.CACHE_ELEMENTS / (probe_ms - engine.threaded_launch_ms)))
    assert split.compute_ms < plain.compute_ms / FIXED.threads
    assert engine.streamed(FIXED.cache_gbs, 1000) == FIXED.cache_gbs  # a launch longer than half the probe: left as measured


def test_an_elementwise_node_on_the_pool_streams_at_the_hot_chains_rates_without_their_launch():
    """Its input is what the node before it has just written: the hot chain's rate up to its size, the big hot
    chain's at its size, each a per-node time less a threaded launch (their nodes run on the pool), then DRAM's
    (decision 1260). A convolution on the pool keeps the bandwidth probes' rates."""
    peaks = replace(FIXED, node_ms=0.05)  # 2 MiB a node in 0.023 ms beyond a threaded launch (0.027)
    engine = HostEngine(peaks, 8)
    sizes = hp.bandwidth_sizes(peaks.last_level_cache_bytes)
    hot = sizes["hot"] / ((peaks.node_ms - engine.threaded_launch_ms) * 1e6)
    big = sizes["big"] / ((peaks.big_node_ms - engine.threaded_launch_ms) * 1e6)
    assert hot > 80 and big > 80
    assert engine.bandwidth_gbs(sizes["hot"] // 2, hot=True, threaded=True) == pytest.approx(hot)
    assert engine.bandwidth_gbs(sizes["big"], hot=True, threaded=True) == pytest.approx(big)
    assert big != pytest.approx(engine.bandwidth_gbs(sizes["big"], threaded=True))  # not the LLC probe's curve
    moved = sizes["big"]
    add = _elementwise("Add", moved // 8)
    split = HostEngine(peaks, 8, pooled=frozenset({add.name})).cost(add, 0, moved)
    assert split.threaded and split.memory_ms == pytest.approx(moved / (big * 1e6))
    conv = engine.cost(_pointwise(moved // 8), 0, moved)
    assert conv.memory_ms == pytest.approx(moved / (engine.bandwidth_gbs(moved, threaded=True) * 1e6))


@pytest.mark.parametrize("name", ["chain", "parallel"])
def test_a_node_costs_a_plain_run_a_fraction_of_what_it_costs_under_the_profiler(name, tmp_path):
    """The plain chains (decision 1263): a node's time in a run without ONNX Runtime's profiler, the chain's run less
    its one node's, against the same chain's kernel and gap under the profiler. Measured here 0.7-0.8 us against
    16-19 us a node for the launch chain, 3-6 us against 23-31 us for the parallel chain (under three CPU hogs: 0.5
    against 10 us, 0.3-1.9 against 9.4 us): asserted less."""
    probes = hp.probe_set(hp.last_level_cache(), ("chain", "parallel", "one"))
    model, feeds, nodes = probes[name]
    one = hp._chain(1, 16) if name == "chain" else probes["one"][0]
    plain = plain_node_ms(model, one, feeds, nodes, 2, False, 40)
    probe = hp._Probe(name, model, feeds, 2, False, tmp_path)
    for _ in range(40):
        probe.run()
    kernel, between = probe.result()
    profiled = (float(np.median(kernel)) + float(np.median(between))) / nodes
    assert 0 <= plain < profiled, (plain, profiled)
