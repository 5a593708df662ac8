"""The one call a measuring command makes when its report is final: the run goes into the history, and to MLflow
when an MLflow tracking URI is set (`--mlflow URI` or `SDK_MLFLOW_URI`). Neither ever fails the run: what could not
be recorded or logged is one `warning:` line on stderr saying why.

`profile` and `optimize` (and any other command that writes a report folder) call `finished(folder, kind)` the same way.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

from tools.history.record import Recorded, record_run

MLFLOW_ENV = "SDK_MLFLOW_URI"
_settings: dict[str, str | None] = {"mlflow_uri": None}  # the command line's --mlflow, for the whole command (fleet threads too)


@contextmanager
def mlflow_uri(uri: str | None) -> Iterator[None]:
    """For the duration of one command: log its runs to this MLflow tracking URI (None: $SDK_MLFLOW_URI, if set)."""
    saved = _settings["mlflow_uri"]
    _settings["mlflow_uri"] = uri
    try:
        yield
    finally:
        _settings["mlflow_uri"] = saved


def current_mlflow_uri() -> str | None:
    return _settings["mlflow_uri"] or os.environ.get(MLFLOW_ENV) or None


def finished(folder: Path | None, kind: str, *, fleet_dir: Path | None = None, result: dict | None = None) -> Recorded:
    """Record the run; log it to MLflow where asked. Never raises."""
    recorded = record_run(folder, kind, fleet_dir=fleet_dir, result=result)
    uri = current_mlflow_uri()
    if uri and folder is not None:
        from tools.history.mlflow_log import log_run

        logged = log_run(Path(folder), kind, uri)
        if logged is not None and recorded.run_id is not None:
            _remember(recorded, logged, uri)
    return recorded


def _remember(recorded: Recorded, mlflow_run_id: str, uri: str) -> None:
    from tools.history.store import open_for_writing, set_mlflow

    try:
        with closing(open_for_writing(recorded.path)) as connection:
            set_mlflow(connection, recorded.run_id, mlflow_run_id, uri)
    except Exception:  # noqa: BLE001, S110 - the run is in MLflow; only the history's pointer to it is missing
        pass
