"""Runs logged to a real MLflow tracking server (MLflow's own server application, SQLite backend, artifacts proxied, on
loopback), and a server that is down never failing a run. Skipped where MLflow is not installed: pip install -e
'.[mlflow]'."""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import threading
import time
import urllib.request
import warnings
from contextlib import closing

import pytest

if importlib.util.find_spec("mlflow") is None:  # found, not imported: every xdist worker collects this module
    pytest.skip("mlflow is not installed: pip install -e '.[mlflow]'", allow_module_level=True)


def free_port() -> int:
    with closing(socket.socket()) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    """MLflow's tracking server on 127.0.0.1 (an ephemeral port), its SQLite backend and its proxied artifact store in a
    temporary folder, stopped at the end of the module. It is the application `mlflow server` serves (`mlflow.server`'s
    REST handlers, configured by the same variables the command sets for its workers), run by a WSGI server in a
    thread of this process: the SDK's client reaches it over HTTP as it reaches a team's server. `mlflow server`
    itself costs about 18 CPU-seconds before it answers (MLflow imported by the command, then again by its uvicorn
    worker); this process imports MLflow for the client in any case, and the server's handlers add about 3."""
    from werkzeug.serving import WSGIRequestHandler, make_server

    with warnings.catch_warnings():  # its imports' deprecation notices are MLflow's, not the SDK's
        warnings.simplefilter("ignore")
        import mlflow.server.fastapi_app  # noqa: F401 - the runs search's handler imports it; here, under the filter
        from mlflow import server

    folder = tmp_path_factory.mktemp("mlflow")
    settings = {
        server.BACKEND_STORE_URI_ENV_VAR: f"sqlite:///{folder / 'mlflow.db'}",
        server.ARTIFACT_ROOT_ENV_VAR: "mlflow-artifacts:/",  # what `mlflow server` sets when it serves the artifacts
        server.SERVE_ARTIFACTS_ENV_VAR: "true",
        server.ARTIFACTS_DESTINATION_ENV_VAR: str(folder / "artifacts"),
    }
    saved = {key: os.environ.get(key) for key in settings}

    class Quiet(WSGIRequestHandler):
        def log_request(self, *args) -> None:
            pass

    os.environ.update(settings)
    try:
        http = make_server("127.0.0.1", 0, server.app, threaded=True, request_handler=Quiet)
        thread = threading.Thread(target=http.serve_forever, name="mlflow-server", daemon=True)
        thread.start()
        try:
            uri = f"http://127.0.0.1:{http.server_port}"
            with warnings.catch_warnings():  # the store's first use creates its tables (SQLAlchemy's notices, not the SDK's)
                warnings.simplefilter("ignore", DeprecationWarning)
                with urllib.request.urlopen(f"{uri}/api/2.0/mlflow/experiments/get-by-name?experiment_name=Default", timeout=60) as answer:
                    assert answer.status == 200
            yield uri
        finally:
            http.shutdown()
            http.server_close()
            thread.join()
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def test_each_run_is_logged_as_an_mlflow_run_and_a_server_that_is_down_never_fails_one(
    mlflow_server, tiny_pipeline, state_dir, tmp_path, monkeypatch, sdk
):
    """A deploy (`--mlflow URI`) and a validation (SDK_MLFLOW_URI) logged as MLflow runs with the report's figures and
    files, and a third run, a validation told to log to a port nothing listens on, passing all the same with one
    warning and recorded in the history. The down server's run validates the release the first deploy installed: a
    deploy of its own only repeated that install (every run reaches MLflow through the same end-of-run hook)."""
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

    # A server that is down: the flag's URI (over the environment's), nothing listening there.
    down = f"http://127.0.0.1:{free_port()}"
    started = time.monotonic()
    done = sdk("validate", str(pipeline.path), "--target", "local", "--report-dir", str(tmp_path / "down"), "--mlflow", down)
    assert done.returncode == 0 and json.loads((tmp_path / "down" / "report.json").read_text())["verdict"] == "PASS"
    warnings = [line for line in done.stderr.splitlines() if line.startswith("warning:")]
    assert warnings == [f"warning: this run was not logged to MLflow at {down}: the server does not answer (Connection refused)"]
    # The run's own time: 32 s at load 13 (a deploy); a client retrying a refused connection with MLflow's default
    # retries would take minutes more.
    assert time.monotonic() - started < 180
    assert json.loads(sdk("history", "--json").stdout)["matching"] == 3  # recorded in the history all the same
    with closing(open_for_reading(tmp_path / "history.sqlite")) as connection:
        unlogged = [r[0] for r in connection.execute("SELECT mlflow_run_id FROM runs WHERE report_dir = ?", (str(tmp_path / "down"),))]
    assert unlogged == [None]
    assert len(client.search_runs([experiment.experiment_id])) == 2  # and nothing reached the running server
