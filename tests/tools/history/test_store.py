"""The history database: its schema and migrations, concurrent writers, and a locked or damaged file that never fails a run."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import textwrap
from contextlib import closing
from pathlib import Path

import pytest

from tools.history.record import record_run
from tools.history.store import MIGRATIONS, SCHEMA_VERSION, NewerSchema, migrate, open_for_reading, open_for_writing

REPO = Path(__file__).resolve().parents[3]


def tables(connection: sqlite3.Connection) -> dict[str, list[str]]:
    names = [r[0] for r in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")]
    return {name: [c[1] for c in connection.execute(f"PRAGMA table_info({name})")] for name in names}


def test_a_new_history_has_the_current_schema_in_wal_mode(tmp_path):
    with closing(open_for_writing(tmp_path / "h.sqlite")) as connection:
        found = tables(connection)
        assert connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        versions = [r[0] for r in connection.execute("SELECT version FROM schema_version ORDER BY version")]
    assert versions == [v for v, _ in MIGRATIONS] and versions[-1] == SCHEMA_VERSION
    assert {"runs", "checks", "stages", "schema_version"} <= set(found)
    assert {"report_dir", "target", "device_class", "release", "model_sha256", "verdict", "mlflow_run_id"} <= set(found["runs"])
    assert found["checks"] == ["run_id", "name", "status", "measured", "bound", "limit_value", "frames"]


def test_an_older_history_is_migrated_keeping_its_runs(tmp_path, history_runs):
    path = tmp_path / "old.sqlite"
    with closing(sqlite3.connect(path, isolation_level=None)) as connection:
        migrate(connection, MIGRATIONS[:1])  # a file written by the first version of the schema
        connection.execute("INSERT INTO runs (report_dir, kind, recorded_at, verdict) VALUES ('/r/1', 'deploy', 'now', 'PASS')")
        assert "mlflow_run_id" not in tables(connection)["runs"]
    with closing(open_for_reading(path)) as connection:  # reading brings it up to date
        assert "mlflow_run_id" in tables(connection)["runs"]
        assert [dict(r) for r in connection.execute("SELECT report_dir, verdict FROM runs")] == [{"report_dir": "/r/1", "verdict": "PASS"}]
        assert max(r[0] for r in connection.execute("SELECT version FROM schema_version")) == SCHEMA_VERSION


def test_a_history_from_a_newer_sdk_is_never_written(tmp_path, history_runs, monkeypatch, capsys):
    path = tmp_path / "newer.sqlite"
    with closing(open_for_writing(path)) as connection:
        connection.execute("INSERT INTO schema_version VALUES (?, 'later', '9.9')", (SCHEMA_VERSION + 1,))
    with closing(sqlite3.connect(path)) as connection, pytest.raises(NewerSchema):
        migrate(connection)
    monkeypatch.setenv("SDK_HISTORY", str(path))
    recorded = record_run(history_runs.folder / "r1-deploy", "deploy")
    assert recorded.run_id is None and "newer than this SDK's" in recorded.reason
    assert f"warning: this run was not recorded in the history {path}: the history's schema is version" in capsys.readouterr().err


def _deploy(sdk, pipeline: Path, report: Path):
    return sdk("deploy", "--target", "local", str(pipeline), "--frames", "12", "--report-dir", str(report))


def test_a_locked_or_damaged_history_never_fails_a_run(tmp_path, history_runs, tiny_pipeline, state_dir, monkeypatch, sdk):
    """Two real deploys: one while another writer holds the history, one on a damaged history file. The history's first
    run is a deploy's report folder indexed (the shared runs' r1-deploy), not a deploy of its own: what this test is
    about starts at the second run."""
    import shutil

    pipeline, _ = tiny_pipeline(frames=12)
    history = tmp_path / "runs.sqlite"  # a history of its own (history_runs' copy of the shared one is history.sqlite)
    monkeypatch.setenv("SDK_HISTORY", str(history))
    monkeypatch.setenv("SDK_HISTORY_TIMEOUT", "0.3")
    shutil.copytree(history_runs.folder / "r1-deploy", tmp_path / "first")
    assert "indexed 1 report folder(s)" in sdk("history", "index", str(tmp_path / "first")).stdout
    # Another writer holds the database: the deploy waits its timeout, says why in one line, and keeps its verdict.
    holder = sqlite3.connect(history, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        done = _deploy(sdk, pipeline.path, tmp_path / "locked")
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert done.returncode == 0 and json.loads((tmp_path / "locked" / "report.json").read_text())["verdict"] == "PASS"
    warnings = [line for line in done.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "not recorded in the history" in warnings[0] and "another writer held the database for over 0.3 s" in warnings[0]
    # Indexed later, it is there.
    assert "indexed 1 report folder(s)" in sdk("history", "index", str(tmp_path / "locked")).stdout
    assert json.loads(sdk("history", "--json").stdout)["matching"] == 2
    # A damaged file: the run goes on and says so; `sdk history` names the file and how to rebuild it.
    history.write_bytes(b"this is not a database" * 100)
    for suffix in ("-wal", "-shm"):
        Path(f"{history}{suffix}").unlink(missing_ok=True)
    done = _deploy(sdk, pipeline.path, tmp_path / "damaged")
    assert done.returncode == 0 and (tmp_path / "damaged" / "report.json").is_file()
    assert "warning: this run was not recorded in the history" in done.stderr and "the database is damaged" in done.stderr
    listed = sdk("history")
    assert listed.returncode == 1 and f"cannot read the history {history}" in listed.stderr and "sdk history index" in listed.stderr


WRITER = textwrap.dedent(
    """
    import os, shutil, sys
    from pathlib import Path
    from tools.history.record import record_run
    source, out, count = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
    for k in range(count):
        folder = out / f"run-{k}"
        shutil.copytree(source, folder)
        recorded = record_run(folder, "deploy", fleet_dir=out)
        assert recorded.run_id is not None, recorded.reason
    """
)


def test_concurrent_writers_from_a_fleet_of_processes_all_land(tmp_path, history_runs):
    """Eight writers (processes, as separate `sdk` commands would be) record ten runs each at the same time."""
    history = tmp_path / "fleet.sqlite"
    env = {**__import__("os").environ, "SDK_HISTORY": str(history), "PYTHONPATH": str(REPO)}
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(history_runs.folder / "r1-validate-1"), str(tmp_path / f"target-{k}"), "10"],
            cwd=tmp_path,
            env=env,
            stderr=subprocess.PIPE,
            text=True,
        )
        for k in range(8)
    ]
    errors = [w.communicate(timeout=120)[1] for w in writers]
    assert [w.returncode for w in writers] == [0] * 8, errors
    assert not any("warning" in e for e in errors)
    with closing(open_for_reading(history)) as connection:
        assert tuple(connection.execute("SELECT COUNT(*), COUNT(DISTINCT report_dir) FROM runs").fetchone()) == (80, 80)
        checks = connection.execute("SELECT COUNT(*) FROM checks").fetchone()[0]
        stages = connection.execute("SELECT COUNT(*) FROM stages").fetchone()[0]
        per_run = connection.execute("SELECT COUNT(*) FROM checks WHERE run_id = 1").fetchone()[0]
        assert checks == 80 * per_run and stages == 80 * 6  # every run whole: its checks and stages with it
        assert connection.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_one_history_per_project_wherever_a_command_runs_in_it(tmp_path, monkeypatch):
    """Without SDK_HISTORY: the nearest reports/history.sqlite upward, else the project's top (its .git), else here."""
    from tools.history.store import history_path, project_history

    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    (project / "pipelines" / "cameras").mkdir(parents=True)
    assert project_history(project / "pipelines" / "cameras") == project / "reports" / "history.sqlite"
    assert project_history(project) == project / "reports" / "history.sqlite"
    nested = project / "pipelines" / "reports"
    nested.mkdir()
    (nested / "history.sqlite").write_bytes(b"")  # a history that already exists nearer wins: nothing is split again
    assert project_history(project / "pipelines" / "cameras") == nested / "history.sqlite"
    loose = tmp_path / "loose"
    loose.mkdir()
    assert project_history(loose) == loose / "reports" / "history.sqlite"
    monkeypatch.delenv("SDK_HISTORY", raising=False)
    monkeypatch.chdir(project / "pipelines" / "cameras")
    assert history_path() == nested / "history.sqlite"


def test_the_history_page_counts_runs_in_whole_numbers_and_writes_numbers_as_people_do():
    from tools.history.trends import _cell
    from tools.reports.svg_chart import Axis

    assert Axis([0, 1], False, whole=True).ticks()[0] == [0, 1]  # two runs: ticks 0 and 1, never 0.5
    assert all(float(t).is_integer() for t in Axis([0, 13], False, whole=True).ticks()[0])
    assert Axis([0, 1], False).ticks()[0] != [0, 1]  # a measured axis keeps its fine steps
    assert _cell(10670.25) == "10,670" and _cell(17.04) == "17.04" and "e+" not in _cell(1.5e7)
