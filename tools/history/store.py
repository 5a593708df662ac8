"""The history database: one SQLite file (standard library only), its schema, its migrations, and safe writers.

Where it lives: `$SDK_HISTORY` when set (`off` records nothing), else `reports/history.sqlite` in the working folder,
the root of the default report folders, whatever `--report-dir` a run was given (decision 0750). WAL mode lets
readers go on while one writer writes; every write is one `BEGIN IMMEDIATE` transaction that waits at most
`SDK_HISTORY_TIMEOUT` seconds (default 5) for another writer, so the targets of a fleet deploy, each on its own
connection, take turns. Schema versions are rows of `schema_version`; `MIGRATIONS` brings any older file up to date
in one transaction, and a file written by a newer SDK is read but never written.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
from collections.abc import Iterable
from datetime import datetime, timezone
from pathlib import Path

from sdk import __version__
from sdk.errors import SdkError
from tools.reports.report_dirs import REPORTS

HISTORY_ENV = "SDK_HISTORY"
TIMEOUT_ENV = "SDK_HISTORY_TIMEOUT"
HISTORY_FILE = "history.sqlite"
DEFAULT_TIMEOUT_S = 5.0
OFF = ("off", "none", "0", "false", "no")

RUN_COLUMNS = (
    "report_dir", "report_sha256", "kind", "started_at", "finished_at", "recorded_at",
    "user", "host", "command_line", "sdk_version", "sdk_commit",
    "target", "fingerprint_sha256", "platform", "module", "power_mode", "device_class",
    "pipeline", "pipeline_sha256", "release", "model_sha256",
    "verdict", "frames", "measured_frames", "dropped", "misses", "miss_ratio",
    "recall", "precision", "mean_iou", "mean_score_drift", "fleet_dir",
)  # fmt: skip
CHECK_COLUMNS = ("name", "status", "measured", "bound", "limit_value", "frames")
STAGE_COLUMNS = ("stage", "p50_ms", "p99_ms", "p999_ms", "max_ms", "mean_ms")

REAL_COLUMNS = ("miss_ratio", "recall", "precision", "mean_iou", "mean_score_drift")
INTEGER_COLUMNS = ("frames", "measured_frames", "dropped", "misses")


def _column(name: str) -> str:
    return f"{name} {'REAL' if name in REAL_COLUMNS else 'INTEGER' if name in INTEGER_COLUMNS else 'TEXT'}"


_V1 = (
    f"""CREATE TABLE runs (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        {", ".join(_column(c) for c in RUN_COLUMNS)},
        UNIQUE (report_dir))""",
    """CREATE TABLE checks (
        run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        name TEXT NOT NULL, status TEXT, measured REAL, bound REAL, limit_value REAL, frames INTEGER,
        PRIMARY KEY (run_id, name))""",
    """CREATE TABLE stages (
        run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        stage TEXT NOT NULL, p50_ms REAL, p99_ms REAL, p999_ms REAL, max_ms REAL, mean_ms REAL,
        PRIMARY KEY (run_id, stage))""",
    "CREATE INDEX runs_by_time ON runs (started_at)",
    "CREATE INDEX runs_by_pipeline ON runs (pipeline, started_at)",
    "CREATE INDEX runs_by_release ON runs (release)",
    "CREATE INDEX runs_by_target ON runs (target)",
)
_V2 = (  # where MLflow keeps the run, once it was logged there
    "ALTER TABLE runs ADD COLUMN mlflow_run_id TEXT",
    "ALTER TABLE runs ADD COLUMN mlflow_uri TEXT",
)
MIGRATIONS: tuple[tuple[int, tuple[str, ...]], ...] = ((1, _V1), (2, _V2))
SCHEMA_VERSION = MIGRATIONS[-1][0]


class HistoryError(SdkError):
    """The history database cannot be read (missing, damaged, locked, or from a newer SDK)."""

    default_hint = "sdk history index reports/ rebuilds it from the report folders"


class NewerSchema(sqlite3.DatabaseError):
    """The file's schema is newer than this SDK knows: read it, never write it."""


def history_path() -> Path | None:
    """The database runs are recorded in, or None when recording is off (`SDK_HISTORY=off`)."""
    value = os.environ.get(HISTORY_ENV)
    if value is not None and value.strip():
        if value.strip().lower() in OFF:
            return None
        return Path(value).expanduser().resolve()
    return project_history(Path.cwd())


def project_history(here: Path) -> Path:
    """One history per project, wherever in it a command runs: the nearest `reports/history.sqlite` from `here`
    upward; else the project's top (the nearest folder holding `.git`); else `here`."""
    here = Path(here).resolve()
    for folder in (here, *here.parents):
        candidate = folder / REPORTS / HISTORY_FILE
        if candidate.is_file():
            return candidate
        if (folder / ".git").exists():
            return candidate
    return here / REPORTS / HISTORY_FILE


def timeout_s() -> float:
    try:
        return max(0.0, float(os.environ.get(TIMEOUT_ENV, DEFAULT_TIMEOUT_S)))
    except ValueError:
        return DEFAULT_TIMEOUT_S


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def read_only_here(path: Path) -> bool:
    """The history's folder (or file) cannot be written by this process: a read-only mount, or no write permission."""
    path = Path(path)
    return not os.access(path.parent, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK))


ALMOST_FULL = 1 << 20  # SQLite says "disk I/O error" where its shared-memory file cannot grow: with less free, a full disk


def _free(path: Path) -> int:
    try:
        return shutil.disk_usage(Path(path).parent).free
    except OSError:
        return ALMOST_FULL


def problem(exc: BaseException, path: Path) -> str | None:
    """What an SQLite error means for the history at `path`, in words a person acts on; None for anything else."""
    text = str(exc)
    if isinstance(exc, sqlite3.OperationalError) and ("full" in text or ("I/O error" in text and _free(path) < ALMOST_FULL)):
        return f"disk full: the history {path} cannot grow ({text}; {_free(path)} bytes free); free space on its disk"
    if isinstance(exc, sqlite3.OperationalError) and read_only_here(path) and ("readonly" in text or "unable to open" in text):
        return f"the history {path} is read-only here (its folder {path.parent} cannot be written): runs are not recorded in it"
    return None


def _open_read_only(path: Path, timeout: float) -> sqlite3.Connection:
    """A history in a folder this process cannot write: opened read-only (mode=ro reads a WAL it finds); where SQLite
    cannot keep its shared-memory file beside it, as an immutable file (nothing can change it from here either)."""
    from urllib.parse import quote

    uri = f"file:{quote(str(path))}"
    try:
        connection = sqlite3.connect(f"{uri}?mode=ro", uri=True, timeout=timeout, isolation_level=None, check_same_thread=False)
        connection.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
        return connection
    except sqlite3.OperationalError:
        pass
    return sqlite3.connect(f"{uri}?immutable=1", uri=True, timeout=timeout, isolation_level=None, check_same_thread=False)


def connect(path: Path, timeout: float | None = None, create: bool = True) -> sqlite3.Connection:
    """A connection in autocommit mode (transactions are explicit), WAL journal, foreign keys on, bounded waits. For
    reading (`create` False) in a folder this process cannot write: read-only (`_open_read_only`)."""
    timeout = timeout_s() if timeout is None else timeout
    path = Path(path)
    if create:
        path.parent.mkdir(parents=True, exist_ok=True)
    elif not path.is_file():
        raise HistoryError(f"no history at {path}", hint="runs are recorded there as they finish; sdk history index DIR indexes earlier ones")
    elif read_only_here(path):
        return _open_read_only(path, timeout)
    connection = sqlite3.connect(str(path), timeout=timeout, isolation_level=None, check_same_thread=False)
    try:
        connection.execute(f"PRAGMA busy_timeout = {int(timeout * 1000)}")
        if connection.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
            connection.execute("PRAGMA journal_mode = WAL")
        connection.execute("PRAGMA synchronous = NORMAL")  # WAL: a power loss may lose the newest rows, never the file
        connection.execute("PRAGMA foreign_keys = ON")
    except BaseException:
        connection.close()
        raise
    return connection


def schema_version(connection: sqlite3.Connection) -> int:
    try:
        return connection.execute("SELECT MAX(version) FROM schema_version").fetchone()[0] or 0
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):
            return 0
        raise


def migrate(connection: sqlite3.Connection, migrations=MIGRATIONS) -> int:
    """Bring the file up to the newest schema in one transaction; returns the version. Raises NewerSchema."""
    newest = migrations[-1][0]
    current = schema_version(connection)
    if current == newest:
        return current
    if current > newest:
        raise NewerSchema(f"the history's schema is version {current}, newer than this SDK's {newest} (SDK {__version__})")
    connection.execute("BEGIN IMMEDIATE")
    try:
        connection.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL, applied_at TEXT NOT NULL, sdk_version TEXT)")
        current = schema_version(connection)  # another writer may have migrated meanwhile
        for version, statements in migrations:
            if version > current:
                for statement in statements:
                    connection.execute(statement)
                connection.execute("INSERT INTO schema_version VALUES (?, ?, ?)", (version, utc_now(), __version__))
        connection.execute("COMMIT")
    except BaseException:
        connection.execute("ROLLBACK")
        raise
    return newest


def open_for_writing(path: Path, timeout: float | None = None) -> sqlite3.Connection:
    connection = connect(path, timeout)
    try:
        migrate(connection)
    except BaseException:
        connection.close()
        raise
    return connection


def open_for_reading(path: Path) -> sqlite3.Connection:
    """For queries: the file must exist; a damaged or newer one is a HistoryError naming it."""
    try:
        connection = connect(path, create=False)
        version = schema_version(connection)
    except sqlite3.DatabaseError as exc:
        said = problem(exc, path)
        if said is not None:
            hint = "free space, or copy the file to a writable folder and name it with --history"
            raise HistoryError(f"cannot read the history: {said}", hint=hint) from None
        raise HistoryError(f"cannot read the history {path}: {exc}", hint=f"move it aside and rebuild it: sdk history index {path.parent}") from None
    if version < SCHEMA_VERSION and read_only_here(path):
        connection.close()
        raise HistoryError(
            f"the history {path} is of an older SDK and read-only here: it cannot be brought up to date",
            hint="copy it to a writable folder and name the copy with --history",
        )
    if version < SCHEMA_VERSION:
        try:
            migrate(connection)
        except sqlite3.DatabaseError as exc:
            connection.close()
            raise HistoryError(f"cannot bring the history {path} up to date: {exc}") from None
    connection.row_factory = sqlite3.Row
    return connection


def insert_run(connection: sqlite3.Connection, run: dict, checks: Iterable[dict], stages: dict[str, dict]) -> int:
    """One run with its checks and stage percentiles, in one transaction. A report folder indexed again replaces its
    row when its report changed (same folder, new sha256) and is left as it is otherwise. Returns the run's id."""
    connection.execute("BEGIN IMMEDIATE")
    try:
        if run.get("report_dir") is not None:
            found = connection.execute("SELECT id, report_sha256 FROM runs WHERE report_dir = ?", (run["report_dir"],)).fetchone()
            if found is not None:
                if found[1] == run.get("report_sha256"):
                    connection.execute("COMMIT")
                    return found[0]
                connection.execute("DELETE FROM runs WHERE id = ?", (found[0],))
        columns = [c for c in RUN_COLUMNS if c in run]
        cursor = connection.execute(f"INSERT INTO runs ({', '.join(columns)}) VALUES ({', '.join('?' for _ in columns)})", [run[c] for c in columns])
        run_id = cursor.lastrowid
        connection.executemany(
            f"INSERT OR REPLACE INTO checks (run_id, {', '.join(CHECK_COLUMNS)}) VALUES (?, {', '.join('?' for _ in CHECK_COLUMNS)})",
            [(run_id, *(c.get(k) for k in CHECK_COLUMNS)) for c in checks],
        )
        connection.executemany(
            f"INSERT OR REPLACE INTO stages (run_id, {', '.join(STAGE_COLUMNS)}) VALUES (?, {', '.join('?' for _ in STAGE_COLUMNS)})",
            [(run_id, stage, *(s.get(k) for k in STAGE_COLUMNS[1:])) for stage, s in stages.items()],
        )
        connection.execute("COMMIT")
    except BaseException:
        connection.execute("ROLLBACK")
        raise
    return run_id


def set_mlflow(connection: sqlite3.Connection, run_id: int, mlflow_run_id: str, uri: str) -> None:
    connection.execute("UPDATE runs SET mlflow_run_id = ?, mlflow_uri = ? WHERE id = ?", (mlflow_run_id, uri, run_id))
