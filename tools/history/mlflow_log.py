"""Each run as an MLflow run, where teams already look (optional: `pip install -e '.[mlflow]'`).

The experiment is the pipeline's name (or `$SDK_MLFLOW_EXPERIMENT`); the run is named `<kind> <target> <release>`.
Parameters: pipeline, release, target, device class (and its platform, module, power mode), kind, model hash, SDK
version. Metrics: every check's measured figure (`check.<name>`), every stage's percentiles (`<stage>.p50_ms`, ...,
`end_to_end.p99_ms`), misses and accuracy. Tags: the verdict and the report folder. Artifacts: report.json,
report.html, junit.xml. A server that is down, slow or refuses costs the run one `warning:` line, never its verdict:
an HTTP server is first reached with a short connect, and MLflow's own retries are bounded.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from pathlib import Path
from urllib.parse import urlparse

EXPERIMENT_ENV = "SDK_MLFLOW_EXPERIMENT"
CONNECT_TIMEOUT_S = 3.0
ARTIFACTS = ("report.json", "report.html", "junit.xml", "selftest.json")
MLFLOW_LIMITS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_TIMEOUT": "20"}  # unless the user set them


def _warn(uri: str, why: str) -> None:
    sys.stderr.write(f"warning: this run was not logged to MLflow at {uri}: {why}\n")


def reachable(uri: str) -> str | None:
    """None when an http(s) tracking server accepts a connection (or the URI is not HTTP); else why not."""
    parsed = urlparse(uri)
    if parsed.scheme not in ("http", "https"):
        return None
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        with socket.create_connection((parsed.hostname or "localhost", port), timeout=CONNECT_TIMEOUT_S):
            return None
    except OSError as exc:
        return f"the server does not answer ({exc.strerror or exc})"


def metrics_of(run: dict, checks: list[dict], stages: dict[str, dict]) -> dict[str, float]:
    out: dict[str, float] = {}
    for check in checks:
        value = check.get("measured")
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out[f"check.{check['name']}"] = float(value)
    for stage, values in stages.items():
        for key, value in values.items():
            if isinstance(value, (int, float)):
                out[f"{stage}.{key}"] = float(value)
    for key in ("frames", "measured_frames", "dropped", "misses", "miss_ratio", "recall", "precision", "mean_iou", "mean_score_drift"):
        if isinstance(run.get(key), (int, float)):
            out[key] = float(run[key])
    return out


def params_of(run: dict) -> dict[str, str]:
    keys = ("pipeline", "release", "target", "device_class", "platform", "module", "power_mode", "kind", "model_sha256", "sdk_version")
    return {key: str(run[key]) for key in keys if run.get(key) is not None}


def _experiment(client, name: str) -> str:
    found = client.get_experiment_by_name(name)
    if found is not None:
        return found.experiment_id
    try:
        return client.create_experiment(name)
    except Exception:  # noqa: BLE001 - another target of the fleet created it meanwhile
        found = client.get_experiment_by_name(name)
        if found is None:
            raise
        return found.experiment_id


def log_run(folder: Path, kind: str, uri: str) -> str | None:
    """Log the run in `folder` to the tracking server at `uri`; its MLflow run id, or None (with a warning)."""
    try:
        import mlflow  # noqa: F401
        from mlflow.entities import Metric, Param, RunTag
        from mlflow.tracking import MlflowClient
    except ImportError:
        _warn(uri, "mlflow is not installed (pip install -e '.[mlflow]')")
        return None
    why = reachable(uri)
    if why is not None:
        _warn(uri, why)
        return None
    for key, value in MLFLOW_LIMITS.items():
        os.environ.setdefault(key, value)
    try:
        from tools.history.record import describe

        run, checks, stages = describe(folder, kind)
        client = MlflowClient(tracking_uri=uri)
        experiment = _experiment(client, os.environ.get(EXPERIMENT_ENV) or run.get("pipeline") or "perception")
        name = " ".join(str(part) for part in (kind, run.get("target"), run.get("release")) if part)
        tags = {"verdict": str(run.get("verdict")), "report_dir": str(folder), "sdk.kind": kind}
        created = client.create_run(experiment, run_name=name, tags=tags)
        run_id = created.info.run_id
        now = int(time.time() * 1000)
        metrics = [Metric(key, value, now, 0) for key, value in metrics_of(run, checks, stages).items()]
        params = [Param(key, value) for key, value in params_of(run).items()]
        for first in range(0, max(len(metrics), 1), 900):  # MLflow takes at most 1000 metrics a batch
            client.log_batch(run_id, metrics=metrics[first : first + 900], params=params if first == 0 else [], tags=[RunTag("sdk.logged", "1")])
        for artifact in ARTIFACTS:
            if (folder / artifact).is_file():
                client.log_artifact(run_id, str(folder / artifact))
        client.set_terminated(run_id, "FINISHED")  # the run ran to its end; its verdict is the `verdict` tag
    except Exception as exc:  # noqa: BLE001 - whatever MLflow raises, the run goes on
        _warn(uri, f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}")
        return None
    return run_id
