"""What ONNX Runtime adds around each node (tools/perf/between_nodes.py, decision 1264). Its own work after the node,
as its profiler times it: the launch chain's after a node on the calling thread, the parallel chain's after a threaded
one, and what the hot chain's and the big hot chain's nodes add at their bytes, linear in a node's activations (not its
weights) between them and beyond; and what the profiler itself adds to a node. Checked at fixed peaks and, for the
premise, against the running ONNX Runtime."""

from __future__ import annotations

import json
import statistics
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.tools.perf.peaks import FIXED
from tools.perf import host_peaks as hp
from tools.perf.between_nodes import gap_after, profiler_ms
from tools.perf.layers import layers_of
from tools.perf.predict import predict_host

MIB = 1 << 20
HOT = 8 * hp.HOT_ELEMENTS  # 2 MiB: what a node of the hot chain reads and writes
BIG = 8 * hp.BIG_ELEMENTS  # 16 MiB: the big hot chain's


def test_the_time_after_a_node_runs_through_the_three_chains_at_their_bytes():
    assert gap_after(FIXED, 0, threaded=False) == pytest.approx(FIXED.gap_ms)  # the launch chain: 16 floats, nothing moved
    assert gap_after(FIXED, 0, threaded=True) == pytest.approx(FIXED.parallel_gap_ms)
    assert gap_after(FIXED, HOT, threaded=True) == pytest.approx(FIXED.node_gap_ms)  # the hot chains' nodes run on the pool
    assert gap_after(FIXED, BIG, threaded=True) == pytest.approx(FIXED.big_gap_ms)
    # Linear in the bytes between them (FIXED: 1 us a MiB up to 2 MiB, 2 us a MiB beyond) and beyond the last.
    assert gap_after(FIXED, MIB, threaded=True) == pytest.approx(FIXED.parallel_gap_ms + 0.001)
    assert gap_after(FIXED, 9 * MIB, threaded=True) == pytest.approx(FIXED.node_gap_ms + 7 * 0.002)
    assert gap_after(FIXED, 30 * MIB, threaded=True) == pytest.approx(FIXED.big_gap_ms + 14 * 0.002)
    # A node on the calling thread adds what the bytes add, to the launch chain's.
    assert gap_after(FIXED, HOT, threaded=False) - FIXED.gap_ms == pytest.approx(FIXED.node_gap_ms - FIXED.parallel_gap_ms)


def test_without_the_big_chain_the_hot_chains_slope_goes_on_and_the_time_never_shrinks_with_the_bytes():
    assert gap_after(replace(FIXED, big_gap_ms=0.0), 8 * MIB, threaded=True) == pytest.approx(FIXED.parallel_gap_ms + 8 * 0.001)
    low = replace(FIXED, node_gap_ms=FIXED.parallel_gap_ms - 0.001)  # a hot chain that met a quieter moment than the parallel one
    assert gap_after(low, HOT, threaded=True) == pytest.approx(FIXED.parallel_gap_ms)
    below = replace(FIXED, big_gap_ms=FIXED.node_gap_ms - 0.001)
    assert gap_after(below, BIG, threaded=True) == pytest.approx(FIXED.node_gap_ms)
    assert gap_after(replace(FIXED, threads=1), 0, threaded=True) == pytest.approx(FIXED.gap_ms)  # one thread: no pool


def _conv(channels: int, side: int, kernel: int):
    """x -> one Conv (channels to channels, kernel x kernel, same size): a threaded node, weights of its own."""
    w = numpy_helper.from_array(np.ones((channels, channels, kernel, kernel), np.float32), "w")
    pad = kernel // 2
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="conv", pads=[pad] * 4)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, side, side])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, channels, side, side])], [w])  # fmt: skip
    return layers_of(onnx.shape_inference.infer_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])))


def test_a_node_is_followed_by_the_time_for_its_activations_not_its_weights():
    model = _conv(64, 8, 3)  # 147 KiB of weights, 32 KiB of activations in and out
    (layer,) = model.layers
    activations = 4 * (layer.input_elements + layer.output_elements)
    assert 4 * layer.weight_elements > 4 * activations
    prediction = predict_host(model, replace(FIXED, wake_ms=0.0), block=0)
    assert prediction.layers[0].threaded
    assert prediction.run_overhead_ms == pytest.approx(gap_after(FIXED, activations, threaded=True))
    big = predict_host(_conv(64, 128, 1), replace(FIXED, wake_ms=0.0), block=0)  # 8 MiB of activations: the time after it grows
    assert big.run_overhead_ms == pytest.approx(gap_after(FIXED, 8 * 64 * 128 * 128, threaded=True))
    assert big.run_overhead_ms > 2 * prediction.run_overhead_ms


def test_what_the_profiler_adds_to_a_node_is_a_chains_node_under_it_less_in_a_plain_run():
    assert profiler_ms(FIXED, threaded=False) == pytest.approx(FIXED.launch_ms + FIXED.gap_ms - FIXED.plain_node_ms)
    assert profiler_ms(FIXED, threaded=True) == pytest.approx(FIXED.parallel_launch_ms + FIXED.parallel_gap_ms - FIXED.plain_parallel_ms)
    assert profiler_ms(replace(FIXED, plain_node_ms=1.0), threaded=False) == 0.0  # never negative


def _gaps(session) -> list[float]:
    """The time between each two consecutive kernels of each run after the first, in us, from the profiler's trace."""
    events = json.loads(Path(session.end_profiling()).read_text())
    runs = sorted((e for e in events if e.get("name") == "model_run"), key=lambda e: e["ts"])[1:]
    kernels = sorted((e for e in events if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")), key=lambda e: e["ts"])
    found = []
    for run in runs:
        inside = [k for k in kernels if run["ts"] <= k["ts"] <= run["ts"] + run["dur"]]
        found += [b["ts"] - a["ts"] - a["dur"] for a, b in zip(inside, inside[1:], strict=False)]
    return found


def test_onnx_runtime_takes_longer_after_a_node_of_many_bytes_than_after_one_of_few(tmp_path):
    """The premise, on the running ONNX Runtime: the big hot chain's nodes (16 MiB each) are followed by more of its own
    work than the launch chain's (64 bytes). Measured here at 2-2.7x (medians of their gaps, a loaded machine)."""
    import onnxruntime as ort

    from sdk.backends.onnxruntime_cpu import session_options

    sessions = {}
    for name, elements in (("few", 16), ("many", hp.BIG_ELEMENTS)):
        options = session_options(2, spinning=False)
        options.enable_profiling = True
        options.profile_file_prefix = str(tmp_path / name)
        sessions[name] = (ort.InferenceSession(hp._chain(8, elements), options, providers=["CPUExecutionProvider"]),
                          {"t0": np.random.default_rng(0).random(elements, dtype=np.float32)})  # fmt: skip
    for _ in range(8):  # in turn: a busy moment meets both
        for session, feeds in sessions.values():
            session.run(None, feeds)
    few, many = (_gaps(session) for session, _ in sessions.values())
    assert len(few) == len(many) == 7 * 7
    assert statistics.median(many) > statistics.median(few)
