"""`sdk history` and `sdk compare` on real runs: two releases of the tiny pipeline, the second with a slowdown planted
in its decoder, each deployed and validated twice on the local target (conftest.py)."""

from __future__ import annotations

import json

from tests.tools.history.conftest import SLOW_MS


def test_history_lists_every_run_with_its_verdict(history_runs, sdk):
    done = sdk("history", "--json")
    assert done.returncode == 0, done.stderr
    listed = json.loads(done.stdout)
    runs = {r["report_dir"]: r for r in listed["runs"]}
    assert listed["matching"] == len(history_runs.runs) == 6
    for name, release in history_runs.runs.items():
        run = runs[str(history_runs.folder / name)]
        assert run["release"] == release and run["verdict"] == "PASS" and run["pipeline"] == "tiny" and run["target"] == "local"
        assert run["kind"] == name.split("-")[1] and run["e2e_p50_ms"] > 0 and run["measured_frames"] == 198
    table = sdk("history")
    assert table.returncode == 0 and table.stdout.count("PASS") == 6 and history_runs.r1 in table.stdout and history_runs.r2 in table.stdout
    assert "6 run(s) from" in table.stderr
    # Filters: a release (by prefix), a kind, a target, a time; a limit shows the newest.
    assert json.loads(sdk("history", "--json", "--release", history_runs.r2[:6]).stdout)["matching"] == 3
    assert json.loads(sdk("history", "--json", "--kind", "deploy", "--target", "local").stdout)["matching"] == 2
    assert json.loads(sdk("history", "--json", "--since", "2099-01-01").stdout)["matching"] == 0
    newest = json.loads(sdk("history", "--json", "--limit", "2").stdout)
    assert [r["report_dir"].rsplit("/", 1)[1] for r in newest["runs"]] == ["r2-validate-2", "r2-validate-1"] and newest["matching"] == 6
    assert sdk("history", "--pipeline", "other").stdout.count("PASS") == 0


def test_history_page_has_the_trend_plots(history_runs, sdk, tmp_path):
    done = sdk("history", "--html", str(tmp_path / "trends.html"))
    assert done.returncode == 0 and "trends:" in done.stderr
    page = (tmp_path / "trends.html").read_text()
    assert page.count("<svg") == 3 and "p99 by release" in page and "p99 by device" in page and history_runs.r2[:12] in page


def test_compare_finds_no_difference_between_runs_of_one_release(history_runs, sdk):
    a, b = history_runs.folder / "r1-validate-1", history_runs.folder / "r1-validate-2"
    done = sdk("compare", str(a), str(b), "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert {f["verdict"] for f in result["figures"]} == {"same"}, [(f["name"], f["relative"], f["interval"]) for f in result["figures"]]
    names = [f["name"] for f in result["figures"]]
    assert names[:2] == ["stages.preprocess.p50_ms", "stages.preprocess.p99_ms"] and "end_to_end.p99_ms" in names
    for figure in result["figures"]:
        assert set(figure) >= {"name", "a", "b", "difference", "interval", "verdict"}
        if figure.get("too_few_runs"):  # one run a side against the history's spread: no unbounded interval
            assert figure["interval"] is None and figure["name"] in result["too_few_runs"]
            continue
        low, high = figure["interval"]
        assert low <= figure["difference"] <= high
    assert result["figures_tested"] == len(names) and result["b"]["release"] == history_runs.r1
    assert any("both sides ran release" in note for note in result["notes"])


def test_compare_finds_the_slowdown_planted_in_a_release(history_runs, sdk):
    # Release ids: each side is the release's runs on the local target's device class (three each).
    done = sdk("compare", history_runs.r1, history_runs.r2, "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    by_name = {f["name"]: f for f in result["figures"]}
    slower = by_name["stages.postprocess.p50_ms"]
    assert slower["verdict"] == "worse" and slower["difference"] > 0.8 * SLOW_MS and slower["interval"][0] > 0
    assert by_name["end_to_end.p50_ms"]["verdict"] == "worse"
    assert len(result["a"]["runs"]) == len(result["b"]["runs"]) == 3
    assert all(f["run_to_run"] is not None for f in result["figures"] if f["name"].endswith("_ms"))
    # The release against the one committed before it on the same device class, and the readable table.
    table = sdk("compare", history_runs.r2)
    assert table.returncode == 0 and "worse" in table.stdout and f"release {history_runs.r1}" in table.stdout
    assert "stages.postprocess.p50_ms" in table.stdout.split("worse:")[-1]
    assert sdk("compare", history_runs.r1, history_runs.r2, "--fail-on-worse").returncode == 3


def test_compare_names_what_it_cannot_resolve(history_runs, sdk, tmp_path):
    unknown = sdk("compare", "beefbeef", history_runs.r1)
    assert unknown.returncode == 1 and "no run of a release 'beefbeef'" in unknown.stderr
    assert "neither a report folder" in sdk("compare", "not/there", history_runs.r1).stderr
    assert "no run #999" in sdk("compare", "#999", history_runs.r1).stderr or "no run 999" in sdk("compare", "999", history_runs.r1).stderr
    first = sdk("compare", history_runs.r1)  # nothing was committed on this device class before R1
    assert first.returncode == 1 and "before" in first.stderr and "hint:" in first.stderr
