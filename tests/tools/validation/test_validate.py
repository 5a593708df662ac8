"""`sdk validate` on the real detector and video: local target, repeats, stress, refusals, report.html."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from sdk.errors import ConfigError, TargetError
from tests.junit_check import read_junit, validate_junit
from tools.validation.pytest_plugin import declared_checks
from tools.validation.validate import Validate

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "pipelines" / "pedestrian.yaml"
# Budgets no frame can miss on a loaded machine: only the sample size and the host checks decide.
RELAXED = """budgets:
  warmup_frames: 5
  end_to_end: {p50_ms: 60000, max_ms: 60000}
  stages:
    infer: {p50_ms: 60000}
  max_dropped: 0
  deadline_ms: 60000
  max_consecutive_misses: 0
  environment: {power_mode: MAXN, on_unmet: warn}
  accuracy: {min_recall: 0.99, min_precision: 0.99}
"""


def relaxed_example(folder: Path) -> Path:
    """The example pipeline with RELAXED budgets, in a folder of its own (assets copied: paths stay confined)."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copytree(REPO / "pipelines" / "assets", folder / "assets", dirs_exist_ok=True)
    text = EXAMPLE.read_text()
    text = text[: text.index("budgets:")] + RELAXED
    (folder / "pedestrian.yaml").write_text(text)
    return folder / "pedestrian.yaml"


@pytest.mark.slow
def test_validate_the_current_release_twice_under_stress(tmp_path, state_dir, deployed_relaxed, monkeypatch):
    import sqlite3

    pipeline = deployed_relaxed(tmp_path / "p", state_dir)  # deployed once per run (conftest.py), copied here
    monkeypatch.setenv("SDK_HISTORY", str(tmp_path / "history.sqlite"))
    result = Validate(pipeline, "local", frames=25, repeat=2, stress="cpu=1", report_dir=tmp_path / "v")()
    with sqlite3.connect(tmp_path / "history.sqlite") as connection:  # each repeat is a run of its own: a replicate for compare
        rows = connection.execute("SELECT kind, report_dir FROM runs ORDER BY id").fetchall()
    assert rows == [("validate", str((tmp_path / "v").resolve())), ("validate", str((tmp_path / "v" / "repeat-2").resolve()))], rows
    report = result.report
    names = [c["name"] for c in report["checks"]]
    assert names == declared_checks(result.pipeline.spec.budgets, 2)
    statuses = {c["name"]: c["status"] for c in report["checks"]}
    assert statuses["determinism.run2"] == "PASS" and statuses["accuracy.recall"] == "PASS"
    assert statuses["environment.power_mode"] == "WARN"  # no nvpmodel here; the file only warns
    assert report["verdict"] == "PASS" and result.exit_code == 0 and report["verdict_detail"] == "PASS, 1 unverified"
    assert report["interference"] == {"cpu_workers": 1, "memory_workers": 0, "memory_mb": 64}
    assert report["determinism_runs"][0]["identical_frames"] == 25 and report["accuracy"]["frames"] == 25
    assert report["environment"]["before"]["kernel"] and report["hashes"]["model_sha256"]
    # junit.xml has one case per check, host checks included, each with its duration; the unverified
    # requirement is skipped, not passed. report.html shows each check and its plots, inline.
    validate_junit(tmp_path / "v" / "junit.xml")
    cases = read_junit(tmp_path / "v" / "junit.xml")
    assert list(cases) == names and cases["environment.power_mode"][0] == "skipped"
    assert cases["determinism.run2"][1].time == report["determinism_runs"][0]["wall_s"] > 0
    assert cases["accuracy.recall"][1].time == report["accuracy"]["duration_s"] > 0
    html = (tmp_path / "v" / "report.html").read_text()
    assert all(name in html for name in names) and ">PASS<" in html and "1 unverified" in html
    assert html.count("<figure") == 4 and html.count("<svg") >= 4 and not list((tmp_path / "v").glob("*.png"))


@pytest.mark.slow
def test_validate_refuses_what_it_cannot_judge(tmp_path, state_dir, deployed_relaxed):
    pipeline = relaxed_example(tmp_path / "p")
    with pytest.raises(TargetError, match="no release is current on local"):
        Validate(pipeline, "local", frames=3, report_dir=tmp_path / "v")()
    with pytest.raises(ConfigError, match="--stress"):
        Validate(pipeline, "local", stress="cpu=lots")()
    deployed_relaxed(tmp_path / "p", state_dir)  # now it is current: deployed once per run (conftest.py), copied here
    pipeline.write_text(pipeline.read_text().replace("p50_ms: 60000, max_ms", "p50_ms: 50000, max_ms"))
    with pytest.raises(TargetError, match="runs another version of pedestrian.yaml"):
        Validate(pipeline, "local", frames=3, report_dir=tmp_path / "v")()
    assert not (tmp_path / "v").exists()  # every refusal came before anything was written
    # A named folder that holds an earlier run's files is refused, or emptied first with force.
    (tmp_path / "v").mkdir()
    (tmp_path / "v" / "report.json").write_text("{}")
    (tmp_path / "v" / "stale.txt").write_text("an earlier run")
    with pytest.raises(ConfigError, match="holds a report"):
        Validate(pipeline, "local", frames=3, report_dir=tmp_path / "v", deploy=True)()
    deployed = Validate(pipeline, "local", frames=3, report_dir=tmp_path / "v", deploy=True, force=True)()
    assert json.loads((tmp_path / "v" / "report.json").read_text())["release"] == deployed.staged.release_id
    assert not (tmp_path / "v" / "stale.txt").exists()
