"""What a run's row holds, and report folders indexed afterwards (`sdk history index DIR`), old ones included."""

from __future__ import annotations

import json
import shutil
from contextlib import closing

from tools.history.query import checks_of
from tools.history.record import describe, device_class, record_run, selftest_as_report
from tools.history.store import open_for_reading


def test_a_run_row_holds_metadata_device_class_checks_and_percentiles(history_runs):
    with closing(open_for_reading(history_runs.history)) as connection:
        row = dict(connection.execute("SELECT * FROM runs WHERE report_dir LIKE '%r1-deploy'").fetchone())
        checks = checks_of(connection, row["id"])
        stages = {r["stage"]: dict(r) for r in connection.execute("SELECT * FROM stages WHERE run_id = ?", (row["id"],))}
    report = json.loads((history_runs.folder / "r1-deploy" / "report.json").read_text())
    assert row["kind"] == "deploy" and row["target"] == "local" and row["pipeline"] == "tiny" and row["release"] == history_runs.r1
    assert row["verdict"] == "PASS" and row["measured_frames"] == report["measured_frames"]
    assert row["started_at"] == report["run"]["started_at"] and row["user"] == report["run"]["user"] and row["host"] == report["run"]["host"]
    assert row["sdk_version"] == report["run"]["sdk_version"] and row["command_line"] == report["run"]["command"]
    assert row["model_sha256"] == report["hashes"]["model_sha256"] and row["fingerprint_sha256"] == report["run"]["device_fingerprint_sha256"]
    device = json.loads((history_runs.folder / "r1-deploy" / "device.json").read_text())
    assert row["platform"] == "linux-generic" and row["module"] == device["arch"] and row["device_class"] == f"linux-generic/{device['arch']}/-"
    assert row["report_dir"] == str(history_runs.folder / "r1-deploy")
    assert [c["name"] for c in checks] == [c["name"] for c in report["checks"]] == ["end_to_end.p50_ms", "end_to_end.max_ms"]
    p50 = checks[0]
    assert (p50["measured"], p50["bound"], p50["limit_value"], p50["status"]) == (
        report["checks"][0]["measured"],
        report["checks"][0]["bound"],
        report["checks"][0]["limit"],
        "PASS",
    )
    assert set(stages) == {"preprocess", "infer", "postprocess", "sink", "end_to_end", "queue"}
    assert stages["infer"]["p99_ms"] == report["stages"]["infer"]["p99_ms"] and stages["end_to_end"]["p999_ms"] == report["end_to_end"]["p999_ms"]


def test_device_class_of_a_jetson_and_of_a_selftest():
    jetson = {"arch": "aarch64", "module": {"platform": "jetson-agx-orin", "name": "Jetson AGX Orin 64GB"}, "power_mode": "MAXN"}
    assert device_class(jetson, "linux-generic") == ("jetson-agx-orin", "Jetson AGX Orin 64GB", "MAXN", "jetson-agx-orin/Jetson AGX Orin 64GB/MAXN")
    assert device_class({"arch": "aarch64"}, "jetson-orin-nx")[3] == "jetson-orin-nx/aarch64/-"
    assert device_class({"arch": "x86_64"}, None)[3] == "linux-generic/x86_64/-"  # the local target, as `sdk targets check` has it
    result = {"target": "orin-01", "release": "abc", "checks": [{"name": "cuda", "status": "PASS"}, {"name": "gpu_tests", "status": "SKIP"}]}
    assert selftest_as_report(result)["verdict"] == "INCONCLUSIVE"
    row, checks, stages = describe(None, "selftest", result=result)
    assert row["kind"] == "selftest" and row["release"] == "abc" and row["verdict"] == "INCONCLUSIVE" and len(checks) == 2 and not stages


def test_old_report_folders_are_indexed_afterwards(history_runs, tmp_path, monkeypatch, sdk):
    monkeypatch.setenv("SDK_HISTORY", str(tmp_path / "rebuilt.sqlite"))
    reports = tmp_path / "reports" / "tiny"
    old = reports / "20240131T081502Z-orin-01-validate"
    shutil.copytree(history_runs.folder / "r1-validate-1", old)
    report = json.loads((old / "report.json").read_text())
    for key in ("run", "verdict_detail", "lost_frames", "outputs"):  # as a report from before these keys
        report.pop(key)
    (old / "report.json").write_text(json.dumps(report))
    (old / "device.json").unlink()
    shutil.copytree(old, old / "repeat-2")  # a determinism repeat belongs to its run
    fleet = reports / "20240201T000000Z-vehicles-deploy"
    shutil.copytree(history_runs.folder / "r2-deploy", fleet / "orin-02")
    (fleet / "fleet.json").write_text("{}")
    (reports / "latest").symlink_to(old.name)  # followed by nobody: its folder is indexed once
    done = sdk("history", "index", str(tmp_path / "reports"))
    assert done.returncode == 0 and "indexed 2 report folder(s)" in done.stdout, done.stderr
    runs = {r["report_dir"]: r for r in json.loads(sdk("history", "--json").stdout)["runs"]}
    assert set(runs) == {str(old), str(fleet / "orin-02")}
    assert runs[str(old)]["kind"] == "validate" and runs[str(old)]["release"] == history_runs.r1 and runs[str(old)]["verdict"] == "PASS"
    assert runs[str(old)]["started_at"] and runs[str(old)]["user"] is None  # no `run` section: the folder's time
    assert runs[str(fleet / "orin-02")]["kind"] == "deploy" and runs[str(fleet / "orin-02")]["fleet_dir"] == str(fleet)
    # Indexed again: nothing new. A report rewritten since: its row replaced, not doubled.
    assert "indexed 2" in sdk("history", "index", str(tmp_path / "reports")).stdout
    report["verdict"] = "FAIL"
    (old / "report.json").write_text(json.dumps(report))
    recorded = record_run(old, "validate")
    runs = {r["report_dir"]: r for r in json.loads(sdk("history", "--json").stdout)["runs"]}
    assert len(runs) == 2 and runs[str(old)]["verdict"] == "FAIL" and runs[str(old)]["id"] == recorded.run_id
    bad = tmp_path / "reports" / "tiny" / "broken-deploy"
    bad.mkdir()
    (bad / "report.json").write_text("{not json")
    done = sdk("history", "index", str(tmp_path / "reports"))
    assert done.returncode == 0 and f"warning: {bad} not indexed" in done.stderr
