"""Activation statistics in one pass: exact against every intermediate tensor exported by ONNX Runtime,
independent of frame order, with rearranged and fused tensors derived, not observed."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from sdk.errors import ModelError
from tools.int8.activation_stats import CollectStatistics, calibration_plan
from tools.int8.histogram_kernel import HISTOGRAM_BINS
from tools.progress import SilentProgress


def small_model(path, *, nan: bool = False):
    """input -> Conv -> Clip(0, 6) -> Conv -> Add(residual) -> Transpose -> Reshape (output)."""
    rng = np.random.default_rng(0)
    weights = [
        numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w1"),
        numpy_helper.from_array(np.full((4, 4, 1, 1), np.nan, np.float32) if nan else rng.standard_normal((4, 4, 1, 1)).astype(np.float32), "w2"),
        numpy_helper.from_array(np.array(0.0, np.float32), "low"),
        numpy_helper.from_array(np.array(6.0, np.float32), "high"),
        numpy_helper.from_array(np.array([1, -1], np.int64), "flat"),
    ]
    nodes = [
        helper.make_node("Conv", ["input", "w1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Clip", ["c1", "low", "high"], ["a1"]),
        helper.make_node("Conv", ["a1", "w2"], ["c2"]),
        helper.make_node("Add", ["c2", "a1"], ["s"]),
        helper.make_node("Transpose", ["s"], ["t"], perm=[0, 2, 3, 1]),
        helper.make_node("Reshape", ["t", "flat"], ["r"]),
    ]
    graph = helper.make_graph(
        nodes,
        "small",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("r", TensorProto.FLOAT, [1, 256])],
        weights,
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), path)
    return path


def every_tensor(path, frames):
    """Each activation on each frame, from ONNX Runtime with every tensor made a graph output."""
    model = onnx.load(str(path))
    names = [o for n in model.graph.node for o in n.output]
    del model.graph.output[:]
    model.graph.output.extend(helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in names)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    runs = [dict(zip(names, session.run(names, {"input": f}), strict=True)) for f in frames]
    return {name: np.stack([r[name] for r in runs]) for name in names} | {"input": np.stack(frames)}


def frames_for(count: int) -> list[np.ndarray]:
    rng = np.random.default_rng(1)
    return [rng.standard_normal((1, 3, 8, 8)).astype(np.float32) * (1 + i) for i in range(count)]


def test_rearranged_and_fused_tensors_are_derived_not_observed(tmp_path):
    plan = calibration_plan(onnx.load(str(small_model(tmp_path / "m.onnx"))))
    assert [t.name for t in plan.observed] == ["a1", "c2", "input", "s"]  # c2 feeds an Add: observed
    assert plan.derived == {"c1": "a1", "t": "s", "r": "s"}  # r -> t -> s resolved to the root
    assert plan.names == ("a1", "c1", "c2", "input", "r", "s", "t")


def test_ranges_and_histograms_equal_the_exported_tensors(tmp_path):
    path = small_model(tmp_path / "m.onnx")
    frames = frames_for(5)
    stats = CollectStatistics(path, histograms=True)(frames, SilentProgress())
    exported = every_tensor(path, frames)
    for tensor in stats.plan.observed:
        values = exported[tensor.name]
        row = stats.index_of(tensor.name)
        assert stats.minimum[row] == values.min() and stats.maximum[row] == values.max()
        amax = stats.amax[row]
        top = 2.0 ** np.floor(np.log2(amax) + 1)  # the power of two above amax
        assert top / 2 <= amax < top and stats.bin_width[row] == top / HISTOGRAM_BINS
        expected, _ = np.histogram(np.abs(values.astype(np.float64)), HISTOGRAM_BINS, range=(0, top))
        assert np.array_equal(stats.histograms[row], expected)
    # Rearranged tensors hold the same values; the Conv before the Clip takes the Clip's statistics.
    assert exported["r"].min() == stats.minimum[stats.index_of("r")] and exported["t"].max() == stats.maximum[stats.index_of("t")]
    assert stats.index_of("c1") == stats.index_of("a1") and stats.minimum[stats.index_of("c1")] == 0.0
    assert exported["c1"].min() < 0  # what it would have been observed as


def test_min_max_alone_is_reduced_in_the_graph_with_the_activation_floor_as_minimum(tmp_path):
    path = small_model(tmp_path / "m.onnx")
    frames = frames_for(5)
    stats = CollectStatistics(path, histograms=False)(frames, SilentProgress())
    counted = CollectStatistics(path, histograms=True)(frames, SilentProgress())
    exported = every_tensor(path, frames)
    assert stats.histograms is None and stats.bin_width is None
    for tensor in stats.plan.observed:
        row = stats.index_of(tensor.name)
        assert stats.maximum[row] == exported[tensor.name].max() == counted.maximum[row]
        if tensor.name != "a1":
            assert stats.minimum[row] == exported[tensor.name].min()
    assert stats.minimum[stats.index_of("a1")] == 0.0  # Clip(0, 6): its floor, not observed
    assert np.array_equal(stats.amax, counted.amax)


def test_statistics_do_not_depend_on_frame_order(tmp_path):
    path = small_model(tmp_path / "m.onnx")
    frames = frames_for(6)
    forward = CollectStatistics(path, histograms=True)(frames, SilentProgress())
    backward = CollectStatistics(path, histograms=True)(frames[::-1], SilentProgress())
    assert np.array_equal(forward.histograms, backward.histograms)
    assert np.array_equal(forward.minimum, backward.minimum) and np.array_equal(forward.maximum, backward.maximum)


def test_a_model_that_produces_nan_is_refused_with_the_tensor_named(tmp_path):
    path = small_model(tmp_path / "m.onnx", nan=True)
    for histograms in (False, True):
        with pytest.raises(ModelError, match="NaN or infinity .* first 'c2'"):
            CollectStatistics(path, histograms=histograms)(frames_for(2), SilentProgress())


def test_the_example_detector_observes_half_its_tensors_and_derives_the_rest(prepared_example):
    plan = calibration_plan(onnx.load(str(prepared_example.model_path)))
    model = onnx.load(str(prepared_example.model_path))
    producers = {o: n.op_type for n in model.graph.node for o in n.output}
    assert len(plan.names) == 194 and len(plan.observed) == 105
    assert {producers[n] for n in plan.derived} == {"Conv", "Reshape", "Transpose", "BatchNormalization"}
    assert all(producers.get(source) not in ("Reshape", "Transpose") for source in plan.derived.values())
