"""What `sdk compare A B` and the regression gate compare: A and B as report folders, run ids or release ids.

A report folder is that run. A run id (`17` or `#17`) is the history's run, read from its report folder. A release id
(or a unique prefix of one) is that release's newest runs (at most `runs`) on one device class: B's newest run's class,
and A's runs on the same class. `last-committed` as A is the release committed before B's on B's device class: the
newest release other than B's whose runs started before B's first one.
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

from sdk.errors import ConfigError
from tools.history.compare import Side
from tools.history.query import RUN_FIELDS, Filters, run_by_id, where
from tools.history.samples import REPORT_FILE, load_run

LAST_COMMITTED = "last-committed"
MEASURED_KINDS = ("deploy", "validate", "profile", "optimize", "run", "evaluate")  # a selftest measures no frames
DEFAULT_RUNS = 5
_RUN_ID = re.compile(r"^#?(\d{1,12})$")
_RELEASE = re.compile(r"^[0-9a-fA-F]{4,64}$")


def is_folder(spec: str) -> bool:
    return (Path(spec) / REPORT_FILE).is_file()


def side_from_folder(spec: str) -> Side:
    return Side(spec, [load_run(Path(spec).resolve(), spec)])


def side_from_rows(spec: str, rows: list[dict]) -> Side:
    runs = []
    for row in rows:
        folder = Path(row["report_dir"]) if row.get("report_dir") else None
        if folder is None or not (folder / REPORT_FILE).is_file():
            raise ConfigError(
                f"{spec}: run {row['id']}'s report folder {folder} is gone",
                hint="a comparison reads each run's frames from its folder; compare runs whose folders are kept",
            )
        runs.append(load_run(folder, f"run {row['id']}"))
    return Side(spec, runs, rows)


def measured_rows(connection: sqlite3.Connection, filters: Filters, extra: str = "", values: tuple = ()) -> list[dict]:
    clause, bound = where(filters)
    kinds = f"kind IN ({','.join('?' for _ in MEASURED_KINDS)})"
    clause = f"{clause} AND {kinds}" if clause else f" WHERE {kinds}"
    sql = f"SELECT {', '.join(RUN_FIELDS)} FROM runs{clause}{extra} ORDER BY started_at DESC, id DESC"
    return [dict(r) for r in connection.execute(sql, [*bound, *MEASURED_KINDS, *values])]


def release_of(connection: sqlite3.Connection, prefix: str, filters: Filters) -> str:
    """The one release id that starts with `prefix` among the runs the filters allow."""
    clause, values = where(Filters(pipeline=filters.pipeline, targets=filters.targets, release=prefix))
    found = [r[0] for r in connection.execute(f"SELECT DISTINCT release FROM runs{clause}", values)]
    if not found:
        raise ConfigError(f"no run of a release {prefix!r} in the history", hint="sdk history lists the runs it holds, with their releases")
    if len(found) > 1:
        raise ConfigError(f"{prefix!r} names {len(found)} releases: {', '.join(sorted(found)[:5])}", hint="give more of the release id")
    return found[0]


def release_rows(connection, release: str, filters: Filters, device_class: str | None, runs: int) -> list[dict]:
    scoped = Filters(pipeline=filters.pipeline, targets=filters.targets, release=release, device_class=device_class)
    rows = [r for r in measured_rows(connection, scoped) if r["release"] == release]
    if not rows:
        where_ = f" on device class {device_class}" if device_class else ""
        raise ConfigError(f"release {release} has no measured run{where_} in the history", hint="deploy or validate it there first")
    return rows[:runs]


def resolve_pair(
    connection: sqlite3.Connection | None, spec_a: str, spec_b: str, filters: Filters | None = None, runs: int = DEFAULT_RUNS
) -> tuple[Side, Side]:
    """(A, B). B first: a release A is taken on B's device class."""
    filters = filters or Filters()
    release_a, release_b = _release_spec(connection, spec_a, filters), _release_spec(connection, spec_b, filters)
    if release_a and release_b:  # two releases: on the newest device class both were measured on
        shared = common_class(connection, release_a, release_b, filters)
        b = side_from_rows(spec_b, release_rows(connection, release_b, filters, shared, runs))
        a = side_from_rows(spec_a, release_rows(connection, release_a, filters, shared, runs))
        if shared is None:
            b.notes.append(f"no device class has runs of both releases: the difference includes the devices' ({_classes(a)} against {_classes(b)})")
        return a, b
    b_rows, b = _resolve(connection, spec_b, filters, None, runs)
    device_class = b_rows[0]["device_class"] if b_rows else _class_of_folder(connection, spec_b)
    if spec_a == LAST_COMMITTED:
        if connection is None:
            raise ConfigError("last-committed needs the history", hint="unset SDK_HISTORY=off, or name A")
        release = last_committed(connection, b, device_class, filters)
        a = side_from_rows(spec_a, release_rows(connection, release, filters, device_class, runs))
    else:
        _, a = _resolve(connection, spec_a, filters, device_class, runs)
    return a, b


def _resolve(connection, spec: str, filters: Filters, device_class: str | None, runs: int) -> tuple[list[dict], Side]:
    if is_folder(spec):
        return [], side_from_folder(spec)
    if Path(spec).is_dir():
        raise ConfigError(f"{spec} holds no report.json", hint="name a run's report folder (a fleet's: one of its target folders)")
    if connection is None:
        raise ConfigError(f"{spec!r} is not a report folder, and there is no history to look it up in", hint="name report folders")
    match = _RUN_ID.match(spec)
    if match:
        row = run_by_id(connection, int(match.group(1)))
        if row is None:
            raise ConfigError(f"no run {spec} in the history", hint="sdk history lists the runs and their ids")
        return [row], side_from_rows(spec, [row])
    if _RELEASE.match(spec):
        release = release_of(connection, spec, filters)
        if device_class is None:
            device_class = release_rows(connection, release, filters, None, 1)[0]["device_class"]
        try:
            rows = release_rows(connection, release, filters, device_class, runs)
            return rows, side_from_rows(spec, rows)
        except ConfigError:  # never measured on the other side's class: its runs elsewhere, said in a note
            rows = release_rows(connection, release, filters, None, runs)
            side = side_from_rows(spec, rows)
            side.notes.append(f"release {release} has no run on device class {device_class}: its runs on {_classes(side)} are compared")
            return rows, side
    raise ConfigError(
        f"{spec!r} is neither a report folder, a run id nor a release id",
        hint="give a folder holding report.json, a run id from `sdk history` (e.g. 17), or a release id (e.g. 3f9c2a1b)",
    )


def _release_spec(connection, spec: str, filters: Filters) -> str | None:
    """The release a spec names, when it names one (not a folder, not a run id)."""
    if connection is None or spec == LAST_COMMITTED or is_folder(spec) or Path(spec).is_dir() or _RUN_ID.match(spec) or not _RELEASE.match(spec):
        return None
    return release_of(connection, spec, filters)


def common_class(connection, release_a: str, release_b: str, filters: Filters) -> str | None:
    """The device class of B's newest run on which A was measured too, or None."""
    classes_a = {r["device_class"] for r in release_rows(connection, release_a, filters, None, 10_000)}
    for row in release_rows(connection, release_b, filters, None, 10_000):
        if row["device_class"] in classes_a:
            return row["device_class"]
    return None


def _classes(side: Side) -> str:
    return ", ".join(sorted({e.get("device_class") or "?" for e in side.entries}))


def _class_of_folder(connection, spec: str) -> str | None:
    if connection is None or not is_folder(spec):
        return None
    row = connection.execute("SELECT device_class FROM runs WHERE report_dir = ?", (str(Path(spec).resolve()),)).fetchone()
    return row[0] if row is not None else None


def last_committed(connection: sqlite3.Connection, b: Side, device_class: str | None, filters: Filters) -> str:
    """The newest release other than B's, of B's pipeline, measured on B's device class before B's first run."""
    release = b.release
    started = [(r.report.get("run") or {}).get("started_at") for r in b.runs]
    first = min((s for s in started if s), default=None)
    pipeline = filters.pipeline or b.runs[0].report.get("pipeline")
    scoped = Filters(pipeline=pipeline, targets=filters.targets, device_class=device_class)
    extra, values = "", ()
    if first is not None:
        extra, values = " AND started_at < ?", (first,)
    for row in measured_rows(connection, scoped, extra, values):
        if row["release"] and row["release"] != release and row["kind"] == "deploy" and row["verdict"] is not None:
            return row["release"]
    raise ConfigError(
        f"no release of {pipeline} was deployed on device class {device_class} before {release}",
        hint="name the baseline release (--baseline RELEASE, or sdk compare RELEASE_A RELEASE_B)",
    )
