"""2:4 sparsity: the masks, the compensation, and TensorRT's sparse-weights flag in the build plan."""

from __future__ import annotations

import numpy as np
import pytest

from tests.tools.optimize.graphs import Builder, frames
from tools.optimize.graph import Graph
from tools.optimize.sparsity import RULES, is_24, sparse_24
from tools.optimize.statistics import Probe, augmented, im2col, input_hessians


def two_zeros_in_every_four(weight: np.ndarray) -> bool:
    """The oracle, written out by hand: for every output, every tap, every run of four consecutive input channels
    (0-3, 4-7, ...), exactly two of the four weights are zero."""
    o, c, kh, kw = weight.shape
    for out in range(o):
        for y in range(kh):
            for x in range(kw):
                for first in range(0, c, 4):
                    zeros = sum(1 for ch in range(first, first + 4) if weight[out, ch, y, x] == 0.0)
                    if zeros != 2:
                        return False
    return True


def test_the_oracle_and_is_24_refuse_one_three_or_four_zeros_and_zeros_across_groups():
    rng = np.random.default_rng(5)
    dense = rng.uniform(0.5, 1.0, (3, 8, 2, 2)).astype(np.float32)
    exact = dense.copy()
    exact[:, [0, 3, 5, 6]] = 0.0  # two of channels 0-3, two of 4-7, at every tap
    assert two_zeros_in_every_four(exact) and is_24(exact)
    for zeros, why in (([0], "one zero"), ([0, 1, 2], "three zeros"), ([0, 1, 2, 3], "four zeros"), ([2, 3, 4, 5, 6, 7], "two, then four")):
        weight = dense.copy()
        weight[:, zeros] = 0.0
        assert not two_zeros_in_every_four(weight), why
        assert not is_24(weight), why
    across = exact.copy()
    across[1, 5, 1, 0], across[1, 4, 1, 0] = dense[1, 5, 1, 0], 0.0  # still two in 4-7, at another place: fine
    assert two_zeros_in_every_four(across) and is_24(across)
    one_tap = exact.copy()
    one_tap[2, 3, 1, 1] = dense[2, 3, 1, 1]  # the last output, its last tap: a single zero there is refused
    assert not two_zeros_in_every_four(one_tap) and not is_24(one_tap)
    assert not two_zeros_in_every_four(dense) and not is_24(dense)


@pytest.mark.parametrize("kernel", [1, 3])
def test_2_4_masks_have_exactly_two_zeros_in_every_four_along_the_input_channels(kernel):
    b = Builder(seed=21, channels=8)
    y = b.conv("x", 8, 6, kernel=kernel, name="K")
    graph = Graph(b.model([y]))
    (node,) = graph.nodes
    info = graph.conv(node)
    calibration = frames(6, channels=8, seed=3)
    hessian = input_hessians(graph, [Probe("K", "x", info)], calibration)["K"]
    weight, bias = sparse_24(graph.weights["K.w"], graph.weights["K.b"], hessian)
    assert weight.shape == graph.weights["K.w"].shape and two_zeros_in_every_four(weight)
    assert np.count_nonzero(weight) == weight.size // 2  # no weight kept by the mask became zero by chance
    # The compensation: the output error on the calibration inputs is below that of zeroing the same weights alone.
    masked = np.where(weight == 0, 0.0, graph.weights["K.w"])
    patches = [augmented(im2col(f[0], info)) for f in calibration]

    def error(w, b_):
        a = np.hstack([w.reshape(6, -1), b_.reshape(-1, 1)])
        full = np.hstack([graph.weights["K.w"].reshape(6, -1), graph.weights["K.b"].reshape(-1, 1)])
        return sum(float(np.sum(((a - full) @ p) ** 2)) for p in patches)

    assert error(weight, bias) < error(masked, graph.weights["K.b"])


def test_2_4_refuses_input_channels_not_in_fours():
    with pytest.raises(ValueError, match="fours"):
        sparse_24(np.ones((2, 6, 1, 1), np.float32), None, np.eye(7))


def test_the_rule_table_names_its_sources_and_claims_nothing_on_the_cpu():
    assert all(rule["sources"] for rule in RULES)
    assert next(r for r in RULES if r["engine"] == "host")["gain"].startswith("none")


def test_the_build_plan_sets_the_sparse_weights_flag_with_real_tensorrt_names():
    from sdk.engine.build_plan import BuildPlan, plan_build
    from sdk.engine.platforms import TensorRTVersion
    from tests.sdk.engine.test_tensorrt_conformity import FULL_BINDINGS, adapter_names, fetch, identifiers_in, missing_from

    dense = plan_build(TensorRTVersion.parse("10.3"), {"x": (1, 3, 8, 8)}, "fp16")
    sparse = plan_build(TensorRTVersion.parse("10.3"), {"x": (1, 3, 8, 8)}, "fp16", sparse_weights=("conv_b", "conv_a"))
    assert sparse.sparse_weights == ("conv_a", "conv_b") and dense.sparse_weights == ()
    assert sparse.digest() != dense.digest()  # a different engine, a different cache key
    assert BuildPlan.from_dict(sparse.as_dict()) == sparse
    assert "sparse_weights" not in _digested(dense)  # dense plans keep the cache keys they always had
    for series in sorted(FULL_BINDINGS):
        names, qualified = adapter_names(series)
        assert ("BuilderFlag", "SPARSE_WEIGHTS") in qualified  # the adapter sets it on every series
        (wheel,) = fetch((FULL_BINDINGS[series][0],), *FULL_BINDINGS[series][1:])
        assert not missing_from({"BuilderFlag", "SPARSE_WEIGHTS", "set_flag"}, identifiers_in(wheel)), series


def test_the_adapter_sets_the_flag_only_for_a_sparse_plan():
    from types import SimpleNamespace

    from sdk.engine.build_plan import plan_build
    from sdk.engine.platforms import TensorRTVersion
    from sdk.engine.trt_adapter import _configure_sparsity

    flags = []
    trt = SimpleNamespace(BuilderFlag=SimpleNamespace(SPARSE_WEIGHTS="SPARSE_WEIGHTS"))
    config = SimpleNamespace(set_flag=flags.append)
    _configure_sparsity(trt, config, plan_build(TensorRTVersion.parse("10.3"), {"x": (1, 3, 8, 8)}, "fp16"))
    assert flags == []
    _configure_sparsity(trt, config, plan_build(TensorRTVersion.parse("10.3"), {"x": (1, 3, 8, 8)}, "fp16", sparse_weights=("c",)))
    assert flags == ["SPARSE_WEIGHTS"]


def _digested(plan) -> dict:
    settings = {k: v for k, v in plan.as_dict().items() if k not in ("layers", "tensorrt", "batch_note")}
    if not settings["sparse_weights"]:
        del settings["sparse_weights"]
    return settings
