"""Runs logged to a real MLflow tracking server (`mlflow server`, SQLite backend, on loopback), and a server that is
down never failing a run. Skipped where MLflow is not installed: pip install -e '.[mlflow]'."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import closing

import pytest

mlflow = pytest.importorskip("mlflow", reason="mlflow is not installed: pip install -e '.[mlflow]'")


def free_port() -> int:
    with closing(socket.socket()) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    """`mlflow server` on 127.0.0.1 with its SQLite backend and artifact store in a temporary folder; stopped (its
    process group, which it started) at the end. Without MLflow's job execution (a second process, its Huey consumer,
    that imports MLflow again for the server's own background jobs: over 10 CPU-seconds of the start; runs are logged
    without it)."""
    folder = tmp_path_factory.mktemp("mlflow")
    port = free_port()
    command = [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
    command += ["--backend-store-uri", f"sqlite:///{folder / 'mlflow.db'}", "--artifacts-destination", str(folder / "artifacts")]
    log = open(folder / "server.log", "wb")  # noqa: SIM115 - closed at teardown
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    server = subprocess.Popen(command, cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    uri = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{uri}/health", timeout=2) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"mlflow server did not start: {(folder / 'server.log').read_text()[-2000:]}")
            time.sleep(0.5)
        yield uri
    finally:
        os.killpg(server.pid, signal.SIGTERM)  # the server and the workers it started, by its own group
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        log.close()


def test_each_run_is_logged_as_an_mlflow_run(mlflow_server, tiny_pipeline, state_dir, tmp_path, monkeypatch, sdk):
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("SDK_HISTORY", str(tmp_path / "history.sqlite"))
    pipeline, _ = tiny_pipeline(frames=30)
    done = sdk("deploy", "--target", "local", str(pipeline.path), "--report-dir", str(tmp_path / "d"), "--mlflow", mlflow_server)
    assert done.returncode == 0 and "warning" not in done.stderr, done.stderr
    monkeypatch.setenv("SDK_MLFLOW_URI", mlflow_server)  # the environment's URI, for a validation
    assert sdk("validate", str(pipeline.path), "--target", "local", "--report-dir", str(tmp_path / "v")).returncode == 0
    client = MlflowClient(tracking_uri=mlflow_server)
    experiment = client.get_experiment_by_name("tiny")
    runs = {r.data.tags["sdk.kind"]: r for r in client.search_runs([experiment.experiment_id])}
    assert set(runs) == {"deploy", "validate"}
    report = json.loads((tmp_path / "d" / "report.json").read_text())
    run = runs["deploy"]
    assert run.info.status == "FINISHED" and run.data.tags["verdict"] == report["verdict"] == "PASS"
    params = run.data.params
    assert params["pipeline"] == "tiny" and params["release"] == report["release"] and params["target"] == "local"
    assert params["device_class"].startswith("linux-generic/")
    metrics = run.data.metrics
    assert metrics["check.end_to_end.p50_ms"] == report["checks"][0]["measured"]
    assert metrics["end_to_end.p99_ms"] == report["end_to_end"]["p99_ms"] and metrics["infer.p50_ms"] == report["stages"]["infer"]["p50_ms"]
    assert {a.path for a in client.list_artifacts(run.info.run_id)} >= {"report.json", "report.html", "junit.xml"}
    listed = json.loads(sdk("history", "--json").stdout)["runs"]
    assert len(listed) == 2
    from tools.history.store import open_for_reading

    with closing(open_for_reading(tmp_path / "history.sqlite")) as connection:
        logged = {r[0] for r in connection.execute("SELECT mlflow_run_id FROM runs")}
    assert logged == {runs["deploy"].info.run_id, runs["validate"].info.run_id}


def test_a_server_that_is_down_never_fails_a_run(tiny_pipeline, state_dir, tmp_path, monkeypatch, sdk):
    monkeypatch.setenv("SDK_HISTORY", str(tmp_path / "history.sqlite"))
    pipeline, _ = tiny_pipeline(frames=12)
    down = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    started = time.monotonic()
    done = sdk("deploy", "--target", "local", str(pipeline.path), "--report-dir", str(tmp_path / "d"), "--mlflow", down)
    assert done.returncode == 0 and json.loads((tmp_path / "d" / "report.json").read_text())["verdict"] == "PASS"
    warnings = [line for line in done.stderr.splitlines() if line.startswith("warning:")]
    assert warnings == [f"warning: this run was not logged to MLflow at {down}: the server does not answer (Connection refused)"]
    # The run's own time: 32 s at load 13; a client retrying a refused connection with MLflow's default retries would
    # take minutes more.
    assert time.monotonic() - started < 180
    assert json.loads(sdk("history", "--json").stdout)["matching"] == 1  # recorded in the history all the same
