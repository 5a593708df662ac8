"""`sdk profile PIPELINE --target local --json OUT` end to end on the example (3 frames, shared by the module): the
report's JSON schema (docs/reference/profile.schema.json), measured and predicted side by side, the machine's speed
during the profile and the prediction scaled by it (and `sdk predict` not), report.html, errors."""

from __future__ import annotations

import json

import jsonschema
import pytest

from tests.conftest import EXAMPLE, REPO
from tests.tools.perf.peaks import FIXED
from tools.perf.host_peaks import peaks_path, store_peaks

SCHEMA = REPO / "docs" / "reference" / "profile.schema.json"
# One worker runs this module: the profile it shares (the `profiled` fixture, about 5 CPU-s) would otherwise be made
# again by each xdist worker that gets one of its tests (--dist loadgroup hands out tests one by one).
pytestmark = pytest.mark.xdist_group("profile-command")


@pytest.fixture(scope="module")
def profiled(tmp_path_factory):
    """One profile of the example; the host's peaks are fixed ones (what is tested is behaviour, not this machine)."""
    import os

    from tools.cli import run
    from tools.state import cache_dir

    spec_threads, spinning = 2, False  # pipelines/pedestrian.yaml: model.threads 2, spinning false
    path, key = peaks_path(spec_threads, spinning, cache_dir())
    store_peaks(FIXED, key, path)
    folder = tmp_path_factory.mktemp("profile")
    os.environ["COLUMNS"] = "200"
    out, report = str(folder / "out.json"), str(folder / "report")
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("SDK_SHARED_CACHE", raising=False)  # this state's own cache, holding the fixed peaks
        code = run(["profile", str(EXAMPLE), "--target", "local", "--frames", "3", "--json", out, "--report-dir", report])
    assert code == 0
    return folder


def _artifacts():
    """The example's prepared model, from the cache the profile prepared it in."""
    from sdk.spec import load_pipeline
    from tools.models.prepare import PrepareModel
    from tools.state import cache_dir

    return PrepareModel(load_pipeline(EXAMPLE), cache_dir())()


def test_the_json_follows_its_schema(profiled):
    report = json.loads((profiled / "out.json").read_text())
    jsonschema.validate(report, json.loads(SCHEMA.read_text()))
    assert report == json.loads((profiled / "report" / "report.json").read_text())
    assert not (profiled / "report" / "UNFINISHED").exists()  # said while it ran, gone with the report
    assert report["frames"] == 3 and report["backend"] == "onnxruntime" and report["prediction"]["platform"] == "host"


def test_every_layer_is_measured_and_predicted_side_by_side(profiled):
    report = json.loads((profiled / "out.json").read_text())
    layers = report["layers"]
    assert all(r["name"] and r["op"] and r["measured_ms"] >= 0 and r["predicted_ms"] is not None for r in layers)
    assert all(r["ratio"] == pytest.approx(r["measured_ms"] / r["predicted_ms"], rel=0.02) for r in layers if r["predicted_ms"] > 0.05)
    total = report["total"]
    assert total["measured_ms"] == pytest.approx(sum(r["measured_ms"] for r in layers) + total["between_layers_ms"], abs=0.01)
    assert total["predicted_ms"] > 0 and total["error"] == pytest.approx(total["predicted_ms"] / total["measured_ms"] - 1, abs=1e-3)
    assert report["accuracy"]["layers_compared"] == len(layers) and report["accuracy"]["top5_overlap"] in range(6)
    assert total["unprofiled_median_ms"] > 0 and total["profiling_overhead_ms"] is not None
    # the host's plain-run figure beside the plain session's median (decision 1263)
    assert 0 < total["predicted_plain_ms"] < total["predicted_ms"]
    assert total["plain_error"] == pytest.approx(total["predicted_plain_ms"] / total["unprofiled_median_ms"] - 1, abs=1e-3)


def test_the_host_speed_is_measured_between_the_frames_and_scales_the_prediction(profiled):
    from sdk.spec import load_pipeline
    from tools.perf.host_speed import PROBES, host_speed
    from tools.perf.layers import load_layers
    from tools.perf.predict import predict_host

    report = json.loads((profiled / "out.json").read_text())
    raw = json.loads((profiled / "report" / "raw" / "profile.json").read_text())
    host = report["host"]
    assert host["applied"] and set(host["factors"]) == set(PROBES) and not host["missing"]
    assert all(p["runs"] == 3 * 2 and p["cached"] > 0 and p["measured"] > 0 for p in host["probes"].values())  # 3 frames, 2 kept a burst
    assert host["contention"]["long_ms"] > 0 and host["contention"]["span_ms"] > host["contention"]["short_ms"]
    # the wake as this profile met it: the parallel probe's first layer in each burst's cold run (decision 1264)
    assert host["wake"]["runs"] == 3 and host["wake"]["cached_ms"] == FIXED.wake_ms and host["wake"]["measured_ms"] >= 0
    # The report's prediction is the model on the peaks this run measured, whatever the machine's speed was.
    speed = host_speed(FIXED, raw["reference"])
    model = load_layers(_artifacts().model_for(load_pipeline(EXAMPLE).spec.model.precision))
    expected = predict_host(model, speed.scale(FIXED), contention=speed.contention)
    assert report["total"]["predicted_ms"] == pytest.approx(expected.total_ms, abs=1e-3)
    assert host["predicted_cached_ms"] == pytest.approx(predict_host(model, FIXED).total_ms, abs=1e-3)
    assert host["speed_factor"] == pytest.approx(host["predicted_cached_ms"] / report["total"]["predicted_ms"], rel=1e-3)
    assert report["prediction"]["peaks"] == FIXED.as_dict()  # the cached peaks, as they are
    assert "the cached peaks alone" in host["text"]


def test_sdk_predict_host_keeps_the_cached_peaks(profiled, monkeypatch):
    import tools.perf.host_speed
    from tools.perf.run import predict_pipeline

    def refuse(*_):
        raise AssertionError("sdk predict has no run to measure the machine's speed against")

    monkeypatch.setattr(tools.perf.host_speed, "host_speed", refuse)
    monkeypatch.delenv("SDK_SHARED_CACHE", raising=False)  # the state's own cache, holding the fixed peaks
    predicted = predict_pipeline(EXAMPLE, "host", None, False)
    profile = json.loads((profiled / "out.json").read_text())
    assert predicted["peaks"] == FIXED.as_dict()
    assert predicted["total"]["predicted_ms"] == pytest.approx(profile["host"]["predicted_cached_ms"], abs=1e-3)


def test_a_device_cpu_profile_has_no_host_speed(profiled):
    """The reference probes describe this machine: a profile assembled as a device's has neither the section nor a
    prediction scaled by them."""
    from sdk.spec import load_pipeline
    from tools.perf.assemble import assemble

    report = assemble(load_pipeline(EXAMPLE), _artifacts(), profiled / "report" / "raw", "orin", {"platform": "jetson-agx-orin"}, 1.0)
    assert "host" not in report and report["total"]["predicted_ms"] is None


def test_the_bottlenecks_and_the_page(profiled):
    report = json.loads((profiled / "out.json").read_text())
    assert len(report["bottlenecks"]) == 5 and all(b["advice"] for b in report["bottlenecks"][:3])
    assert report["resolution"]["input"] == [300, 300] and 0 < report["resolution"]["share"] <= 1
    page = (profiled / "report" / "report.html").read_text()
    assert "host speed:" in page and page.count("<svg") == 2 and "roofline" in page and report["bottlenecks"][0]["name"][:40] in page


def test_a_bad_frame_count_and_an_unknown_target_are_one_error_line(sdk):
    done = sdk("profile", str(EXAMPLE), "--target", "local", "--frames", "0")
    assert done.returncode == 1 and done.stderr.count("error:") == 1 and "Traceback" not in done.stderr
    done = sdk("profile", str(EXAMPLE), "--target", "nowhere")
    assert done.returncode == 1 and "error:" in done.stderr and "hint:" in done.stderr


def test_the_profile_is_kept_in_the_history(profiled):
    """A profile run is a row of the run history (kind `profile`, its target, pipeline and report folder)."""
    import os
    import sqlite3
    from contextlib import closing

    with closing(sqlite3.connect(os.environ["SDK_HISTORY"])) as connection:
        rows = connection.execute("SELECT kind, target, pipeline FROM runs WHERE report_dir = ?", (str((profiled / "report").resolve()),)).fetchall()
    assert rows == [("profile", "local", "pedestrian")]


def test_piped_at_80_columns_nothing_is_cut_no_negative_overhead_and_points_above_the_roof_are_explained(profiled):
    """The terminal summary written into a pipe that says 80 columns: whole rows; a profiled run faster than the plain
    ones is said to be noise, never a negative overhead; layers measured above the roof get the roof's meaning."""
    import io

    from rich.console import Console

    from tools.perf.report import render, write_html

    report = json.loads((profiled / "out.json").read_text())
    report["total"]["profiling_overhead_ms"] = -70.0
    roof = report["prediction"]["roofline"]

    def over_roof(r) -> float:
        return r["achieved_gflops"] / min(roof["peak_gflops"], r["intensity"] * roof["bandwidth_gbs"])

    # Planted above every measured point (with the fixed peaks, a fast machine's layers plot several times above the
    # roof by themselves), so that the text names the planted ratio.
    measured = max((over_roof(r) for r in report["layers"] if r.get("intensity") and r.get("achieved_gflops")), default=0.0)
    planted = max(3.0, round(2 * measured, 1))
    layer = next(r for r in report["layers"] if r.get("intensity"))
    layer["achieved_gflops"] = planted * min(roof["peak_gflops"], layer["intensity"] * roof["bandwidth_gbs"])
    out = io.StringIO()
    render(Console(file=out, width=80, force_terminal=False), report)
    text = out.getvalue()
    assert "…" not in text and max(len(line) for line in text.splitlines()) > 80, text  # no column cut to fit 80
    assert "-70" not in text and "profiling overhead not measurable (the profiled runs took 70.000 ms a frame less" in text
    assert f"layers plot above the roof (up to {planted:.1f}x): the roof is this machine's rate on the SDK's reference convolution" in text
    (profiled / "again").mkdir(exist_ok=True)
    page = write_html(report, profiled / "again").read_text()
    assert "-70" not in page and "plot above the roof" in page
