"""The performance model without a device: the platform facts (every row sourced), `sdk predict` for every platform,
the bound classification on synthetic layers of known intensity, fusion, DLA transitions, and the bottleneck rules."""

from __future__ import annotations

import json
from dataclasses import replace
from types import SimpleNamespace

import pytest

from tests.tools.perf.peaks import FIXED
from tools.perf.analysis import classify_bound, ridge_point, spearman, top_overlap
from tools.perf.bottlenecks import SOURCES, advise, bottlenecks
from tools.perf.engines import HostEngine, channel_efficiency, sparse_candidate
from tools.perf.host_peaks import host_peaks, measure_peaks, peaks_path, store_peaks
from tools.perf.layers import Layer, load_layers
from tools.perf.nchwc import reorders
from tools.perf.platforms import machine, platform_facts, platform_names
from tools.perf.predict import fusion_groups, predict_device, predict_host


def _sourced(block: dict, sources: dict, where: str) -> None:
    keys = [block[k] for k in ("source", "tops_source", "mode_source", "memory_source", "tf32_source") if k in block]
    assert keys or where.split(".")[-2] == "modes", f"{where} has no source"
    for key in keys:
        assert key in sources, f"{where}: unknown source {key}"


def test_every_platform_fact_has_a_source():
    facts = platform_facts()
    sources = facts["sources"]
    assert all(s["title"] and s["url"].startswith("https://") for s in sources.values())
    for name, module in facts["platforms"].items():
        for part in ("gpu", "dla", "memory", "power_modes"):
            _sourced(module[part], sources, f"{name}.{part}")
        for mode, values in module["power_modes"]["modes"].items():
            _sourced(values, sources, f"{name}.power_modes.modes.{mode}")  # the mode block's own source or its table's
        assert module["power_modes"]["default"] in module["power_modes"]["modes"]
    _sourced(facts["precision"], sources, "precision")
    used = {v for m in facts["platforms"].values() for part in m.values() if isinstance(part, dict) for k, v in part.items() if k == "source"}
    assert used <= set(sources)


def test_the_published_figures_come_out_of_the_table():
    agx = machine("jetson-agx-orin", "MAXN")  # the family name means the 64GB module, as target files name it
    assert agx.platform == "jetson-agx-orin-64gb" and agx.power_mode == "MAXN"
    assert agx.gpu.sparse_tops["int8"] + 2 * agx.dla.sparse_tops["int8"] == pytest.approx(276)  # 171 + 105 (DLA-SW table)
    assert agx.gpu.dense_tops["int8"] == pytest.approx(85.5) and agx.gpu.memory_gbs == 204.8
    assert machine("jetson-agx-orin-64gb", "30W").gpu.sparse_tops["int8"] == 41
    nano = machine("jetson-orin-nano-8gb", "MAXN_SUPER")
    assert nano.gpu.sparse_tops["int8"] == 67 and nano.gpu.memory_gbs == 102 and nano.dla is None
    assert machine("jetson-orin-nano-8gb").gpu.sparse_tops["int8"] == pytest.approx(40) and machine("jetson-thor").dla is None
    assert machine("jetson-orin-nx-8gb").dla.cores == 1 and machine("drive-orin").dla.cores == 2
    nx_super = machine("jetson-orin-nx-16gb", "MAXN_SUPER")
    assert nx_super.gpu.sparse_tops["int8"] + 2 * nx_super.dla.sparse_tops["int8"] == pytest.approx(157)
    assert all(source["url"] for source in agx.source_titles())


def test_unknown_platforms_and_modes_are_refused():
    from sdk.errors import ConfigError

    with pytest.raises(ConfigError, match="unknown platform 'jetson-tx2'"):
        machine("jetson-tx2")
    with pytest.raises(ConfigError, match="has no power mode 'TURBO'"):
        machine("jetson-agx-orin-64gb", "TURBO")


@pytest.fixture(scope="module")
def example_layers(prepared_example):
    return load_layers(prepared_example.model_path)


@pytest.mark.parametrize("platform", platform_names())
def test_predict_every_platform_without_a_device(platform, example_layers):
    target = machine(platform)
    for precision in ("fp32", "fp16", "int8"):
        prediction = predict_device(example_layers, target, precision)
        assert prediction.total_ms > 0 and all(p.engine == "gpu" and (p.ms > 0) != bool(p.fusion) for p in prediction.layers)
    assert predict_device(example_layers, target, "int8").total_ms < predict_device(example_layers, target, "fp32").total_ms


def test_dla_placement_adds_transitions(example_layers, prepared_example):
    from sdk.engine.platforms import TensorRTVersion, dla_availability
    from tools.dla.analysis import analyse
    from tools.dla.graph import load_graph

    version = TensorRTVersion.parse("10.3")
    availability = dla_availability("jetson-agx-orin", version)
    placement = analyse(load_graph(prepared_example.model_path), "m", "jetson-agx-orin", version, availability, "int8")
    prediction = predict_device(example_layers, machine("jetson-agx-orin"), "int8", placement)
    on_dla = {p.head for p in prediction.layers if p.engine == "dla"}
    assert on_dla and len(prediction.transitions) >= placement.transitions > 0
    assert all(t.direction in ("gpu->dla", "dla->gpu") and t.ms > 0 for t in prediction.transitions)
    assert prediction.run_overhead_ms > 0 and any("transition" in n for n in prediction.notes)


def test_sdk_predict_runs_for_every_platform_in_the_table(sdk, tmp_path):
    from tests.conftest import EXAMPLE

    for platform in platform_facts()["platforms"]:
        out = tmp_path / f"{platform}.json"
        done = sdk("predict", str(EXAMPLE), "--platform", platform, "--json", str(out))
        assert done.returncode == 0, done.stderr
        report = json.loads(out.read_text())
        assert report["platform"] == platform and report["total"]["predicted_ms"] > 0 and report["sources"]
    done = sdk("predict", str(EXAMPLE), "--platform", "jetson-agx-orin", "--dla", "--precision", "int8", "--json", str(tmp_path / "dla.json"))
    assert done.returncode == 0 and "transitions" in done.stdout
    refused = sdk("predict", str(EXAMPLE), "--platform", "jetson-thor", "--dla")
    assert refused.returncode == 1 and "error:" in refused.stderr and "no DLA" in refused.stderr


def test_the_bound_of_synthetic_layers_of_known_intensity():
    peak, bandwidth = 1000.0, 100.0  # GFLOP/s, GB/s: the ridge is at 10 FLOP/byte
    assert ridge_point(peak, bandwidth) == 10.0
    assert classify_bound(20_000_000, 1_000_000, peak, bandwidth) == "compute"  # intensity 20
    assert classify_bound(5_000_000, 1_000_000, peak, bandwidth) == "memory"  # intensity 5
    assert classify_bound(2_000, 100, peak, bandwidth, launch_ms=0.01) == "launch"  # 2 ns of work, 10 us to launch


def _layer(op_class: str, channels=(64, 64), flops=10_000_000, **kwargs) -> Layer:
    base = dict(index=0, name="x", op="Conv", op_class=op_class, inputs=("a",), outputs=("b",), input_shapes=((1, 64, 32, 32),),
                output_shapes=((1, 64, 32, 32),), macs=flops // 2, flops=flops, weight_elements=0, input_elements=65536,
                output_elements=65536, channels=channels, kernel=(1, 1))  # fmt: skip
    return Layer(**{**base, **kwargs})


def test_the_host_engine_roofline():
    engine = HostEngine(FIXED)
    wide = engine.cost(_layer("conv_pointwise", (512, 512)), 1_000_000_000, 1_000_000)
    assert wide.bound == "compute" and wide.compute_ms == pytest.approx(1e9 / (95 * channel_efficiency(512, engine.half) * 1e6), rel=1e-6)
    depthwise = engine.cost(_layer("conv_depthwise"), 100_000, 4_000_000)  # within the cache probe's size
    # a threaded node: the cache probe's rate without the launch its own node paid (decision 1260)
    assert depthwise.bound == "memory" and depthwise.memory_ms == pytest.approx(4e6 / (engine.bandwidth_gbs(4_000_000, threaded=True) * 1e6))
    assert engine.bandwidth_gbs(4_000_000, threaded=True) > engine.bandwidth_gbs(4_000_000) == 40.0
    between = (4 << 20) * 8**0.5  # geometric middle of the cache probe's size (4 MiB) and the LLC probe's (32 MiB)
    assert engine.bandwidth_gbs(int(between)) == pytest.approx((40.0 * 20.0) ** 0.5, rel=1e-6)
    tiny = engine.cost(_layer("elementwise", None, 64), 64, 512)
    assert tiny.bound == "launch"
    assert engine.bandwidth_gbs(64 << 20) < engine.bandwidth_gbs(1 << 20) == 40.0
    assert engine.cost(_layer("conv_pointwise", (16, 16)), 10**8, 10**5).ms > engine.cost(_layer("conv_pointwise", (64, 64)), 10**8, 10**5).ms


def test_fusion_conv_bias_activation_and_swish(example_layers):
    groups = fusion_groups(example_layers, "onnxruntime")
    by_name = example_layers.by_name()
    fused = [g for g in groups if by_name[g.head].op == "Conv" and len(g.members) > 1]
    assert fused and all({by_name[m].op for m in g.members[1:]} <= {"Clip", "Relu", "Add", "BatchNormalization"} for g in fused)
    assert sum(len(g.members) for g in groups) == len(example_layers.layers)
    assert len(fusion_groups(example_layers, "tensorrt")) <= len(groups)


def test_host_prediction_and_reorders(example_layers):
    prediction = predict_host(example_layers, FIXED, block=16)
    assert prediction.backend == "onnxruntime" and prediction.total_ms > sum(p.ms for p in prediction.layers) - 1e-9
    assert all(sum(p.shares) == pytest.approx(p.ms) for p in prediction.layers)
    groups = fusion_groups(example_layers, "onnxruntime")
    assert reorders(example_layers, 16, groups) and not reorders(example_layers, 0, groups)  # Arm: no NCHWc transform
    assert predict_host(example_layers, FIXED, block=0).total_ms < prediction.total_ms


def test_the_plain_run_spares_each_node_the_profilers_cost_and_keeps_the_work(example_layers):
    """`plain_ms`, the model's time in a run without ONNX Runtime's profiler (decision 1263): each node, a reorder too,
    is spared once what the profiler adds to a node (the chains' time a node under the profiler less in a plain run);
    its work is the profiled prediction's."""
    prediction = predict_host(example_layers, FIXED, block=16)
    assert prediction.plain_ms < prediction.total_ms
    nodes = len(prediction.layers) + len(reorders(example_layers, 16, fusion_groups(example_layers, "onnxruntime")))
    dearer_peaks = replace(FIXED, plain_node_ms=FIXED.plain_node_ms + 0.002, plain_parallel_ms=FIXED.plain_parallel_ms + 0.002)
    dearer = predict_host(example_layers, dearer_peaks, block=16)
    assert dearer.plain_ms - prediction.plain_ms == pytest.approx(0.002 * nodes)  # once a node
    assert dearer.total_ms == pytest.approx(prediction.total_ms)  # the profiled figure does not use them
    # With no fixed cost a node under the profiler either, the two figures are one: the same work
    bare = replace(FIXED, launch_ms=0.0, gap_ms=0.0, node_gap_ms=0.0, parallel_launch_ms=0.0, parallel_gap_ms=0.0, wake_ms=0.0,
                   plain_node_ms=1e-12, plain_parallel_ms=1e-12)  # fmt: skip
    both = predict_host(example_layers, bare, block=16)
    assert both.plain_ms == pytest.approx(both.total_ms, rel=1e-6)
    older = predict_host(example_layers, replace(FIXED, plain_node_ms=0.0, plain_parallel_ms=0.0), block=16)
    assert older.plain_ms is None  # peaks measured without the plain chains: no figure rather than a wrong one


def test_bottleneck_rules_name_their_sources():
    row = {"name": "conv", "op": "Conv", "op_class": "conv", "channels": [24, 100], "bound": "compute", "intensity": 50.0,
           "fused": ["conv", "relu"], "measured_ms": 2.0}  # fmt: skip
    rules = {a.rule for a in advise(row, "int8", fallbacks={"relu": "Clip above 6"}, candidates={"conv"})}
    assert rules == {"channels", "compute", "dla-fallback", "sparsity"}
    assert not [a for a in advise({**row, "channels": [32, 64]}, "int8") if a.rule == "channels"]
    assert not [a for a in advise({**row, "channels": [24, 64]}, "fp16") if a.rule == "channels"]  # 24 is a multiple of 8
    assert [a.text for a in advise({**row, "channels": [20, 64]}, "fp16") if a.rule == "channels"] == [
        "channels [20, 64] are not multiples of 8 (fp16): the tensor cores compute padding; 20 -> 24 would use them fully"
    ]
    depthwise = advise({**row, "op_class": "conv_depthwise", "bound": "memory"}, "fp16")
    assert any(a.rule == "memory" for a in depthwise)
    top = bottlenecks([row, {**row, "name": "small", "measured_ms": 1.0}], "int8", count=1)
    assert top[0]["name"] == "conv" and top[0]["share"] == pytest.approx(2 / 3, abs=1e-4)
    assert all(a["source"] in SOURCES.values() for a in top[0]["advice"])
    assert sparse_candidate(_layer("conv", (256, 256), groups=1), "gpu") and not sparse_candidate(_layer("conv", (64, 64)), "gpu")
    assert sparse_candidate(_layer("conv", (128, 64)), "dla", "int8") and not sparse_candidate(_layer("conv_depthwise", (128, 128)), "dla")
    assert not sparse_candidate(_layer("conv", (128, 64)), "dla", "fp16")  # DLA structured sparsity is INT8 only


def test_rank_agreement_measures():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    rows = [{"name": str(i), "measured_ms": float(i), "predicted_ms": float(i if i != 9 else 0)} for i in range(10)]
    assert top_overlap(rows) == 4


def test_host_peaks_are_measured_once_and_cached(tmp_path):
    quick = measure_peaks(1, False, tmp_path / "probe", runs=3, passes=1)
    assert all(getattr(quick, f) > 0 for f in ("gemm_gflops", "conv_gflops", "dram_gbs", "cache_gbs", "launch_ms", "narrow_gflops", "resize_gelems",
                                               "resize2x_gelems"))  # fmt: skip
    assert quick.plain_node_ms >= 0 and quick.plain_parallel_ms >= 0
    path, key = peaks_path(1, False, tmp_path)
    store_peaks(FIXED, key, path)
    assert host_peaks(1, False, tmp_path) == FIXED  # read from the cache, not measured
    assert not list((tmp_path / "probe").glob(".probe*"))  # the probes' traces are removed


def test_every_state_folder_of_a_machine_may_share_its_peaks(tmp_path, monkeypatch):
    """SDK_SHARED_CACHE: a prediction for this host reads the peaks cached there, whichever state folder it runs in."""
    from sdk.spec import load_pipeline
    from tests.conftest import EXAMPLE, tiny_yolo
    from tools.perf.layers import load_layers
    from tools.perf.targets import host_prediction
    from tools.state import cache_dir, shared_cache_dir

    monkeypatch.setenv("SDK_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("SDK_SHARED_CACHE", raising=False)
    assert shared_cache_dir() == cache_dir()
    monkeypatch.setenv("SDK_SHARED_CACHE", str(tmp_path / "machine"))
    spec = load_pipeline(EXAMPLE).spec.model
    path, key = peaks_path(spec.threads, spec.spinning, tmp_path / "machine")
    store_peaks(FIXED, key, path)
    model = load_layers(tiny_yolo(tmp_path / "tiny.onnx"))
    assert host_prediction(model, SimpleNamespace(spec=SimpleNamespace(model=spec)))[1] == FIXED
    assert not (tmp_path / "state").exists()  # nothing measured or written in the state folder


def test_the_platform_page_shows_every_module_and_source():
    from tests.conftest import REPO

    page = (REPO / "docs" / "platforms.md").read_text()
    facts = platform_facts()
    assert all(f"`{name}`" in page for name in facts["platforms"])
    assert all(source["url"] in page and f"**{key}**" in page for key, source in facts["sources"].items())
