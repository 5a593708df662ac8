"""A deploy whose latency budget failed shows the three layers taking the most time: measured by TensorRT's profiler
where the run has them, else predicted for the target; nothing when only a non-latency check failed."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from rich.console import Console

from tests.conftest import EXAMPLE
from tools.perf.host_peaks import peaks_path, store_peaks
from tools.perf.summary import latency_failed, render_top_layers
from tools.targets import LocalTarget

FAIL = {"verdict": "FAIL", "target": "local", "checks": [{"name": "end_to_end.p99_ms", "status": "FAIL"}]}


def _shown(report: dict, target) -> str:
    from sdk.spec import load_pipeline

    console = Console(record=True, width=200)
    render_top_layers(console, SimpleNamespace(report=report, pipeline=load_pipeline(EXAMPLE)), target)
    return console.export_text()


def test_only_a_failed_latency_budget_shows_layers():
    assert latency_failed(FAIL)
    assert not latency_failed({**FAIL, "checks": [{"name": "accuracy.min_recall", "status": "FAIL"}]})
    assert not latency_failed({**FAIL, "verdict": "PASS"})
    assert _shown({**FAIL, "verdict": "PASS"}, LocalTarget("local", Path("/nowhere"))) == ""


def test_measured_layers_come_first():
    text = _shown({**FAIL, "slowest_layers": [["conv_a", 4.0], ["conv_b", 3.0], ["conv_c", 2.0], ["conv_d", 1.0]]}, LocalTarget("local", Path("/x")))
    assert "measured by TensorRT's profiler" in text and "1. conv_a: 4.000 ms" in text and "conv_d" not in text
    assert f"sdk profile {EXAMPLE} --target local" in text


def test_otherwise_the_prediction_for_the_target(tmp_path, monkeypatch):
    from tests.tools.perf.peaks import FIXED
    from tools.state import cache_dir

    monkeypatch.delenv("SDK_SHARED_CACHE", raising=False)  # this state's own cache, holding the fixed peaks
    path, key = peaks_path(2, False, cache_dir())
    store_peaks(FIXED, key, path)
    text = _shown(FAIL, LocalTarget("local", tmp_path))
    assert "predicted for this machine" in text and "3. " in text and "4. " not in text
    vehicle = SimpleNamespace(spec=SimpleNamespace(platform="jetson-orin-nano"))
    assert "predicted for Jetson Orin Nano 8GB" in _shown({**FAIL, "target": "nano"}, vehicle)
    sim = SimpleNamespace(name="sim", spec=SimpleNamespace(platform="linux-generic", host="127.0.0.1"))  # `sdk targets sim`
    text = _shown({**FAIL, "target": "sim"}, sim)
    assert "predicted for this machine, which runs the linux-generic target sim" in text and "3. " in text
    assert "could not be predicted" not in text


def test_layer_names_in_tables_tell_the_layers_apart():
    """Ultralytics names every convolution `.../conv/Conv`: a table shows the shortest end of each path that no other
    layer shares, and a long one keeps its distinguishing part rather than being cut where names differ."""
    from tools.perf.report import short_name

    names = ["/model.0/conv/Conv", "/model.1/conv/Conv", "/model.22/cv2.0/cv2.0.0/conv/Conv"]
    names.append("/model.22/cv3.0/cv3.0.0/conv/Conv + /act/Mul")
    shown = [short_name(n, 48, names) for n in names]
    assert shown == ["model.0/conv/Conv", "model.1/conv/Conv", "cv2.0.0/conv/Conv", "cv3.0.0/conv/Conv +1"], shown
    assert len(set(shown)) == len(names)
    assert short_name("/backbone/stage1/block0/conv/Conv") == "conv/Conv"  # alone, two parts are enough
    deep = [f"/a/a/a/very_long_distinguishing_block_name_{n}/x/y/z/conv/Conv" for n in ("one", "two")]
    narrow = [short_name(n, 48, deep) for n in deep]
    assert narrow[0] != narrow[1] and all(len(t) <= 48 for t in narrow), narrow
