"""`sdk history`: the runs the history holds, filtered by pipeline, target or group, release and time; newest first.

Filters are SQL on indexed columns, so ten thousand runs answer in well under a second (tests/benchmarks/bench_history.py).
"""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from sdk.errors import ConfigError

SINCE_UNITS = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
RUN_FIELDS = (
    "id", "kind", "started_at", "target", "device_class", "pipeline", "release", "verdict", "measured_frames",
    "dropped", "misses", "miss_ratio", "recall", "precision", "mean_iou", "report_dir", "user", "host", "sdk_version",
    "model_sha256", "fingerprint_sha256", "platform", "module", "power_mode", "fleet_dir", "command_line",
)  # fmt: skip


@dataclass(frozen=True)
class Filters:
    pipeline: str | None = None
    targets: tuple[str, ...] = ()
    release: str | None = None
    since: str | None = None  # ISO 8601 UTC
    kind: str | None = None
    device_class: str | None = None
    limit: int | None = None


def parse_since(text: str | None, now: datetime | None = None) -> str | None:
    """`7d`, `12h`, `30m`, `2w` (before now), or an ISO date or time (`2025-01-31`, `2025-01-31T08:00`; UTC unless it says)."""
    if text is None:
        return None
    now = now or datetime.now(timezone.utc)
    match = re.fullmatch(r"\s*(\d+)\s*([mhdw])\s*", text)
    if match:
        return (now - timedelta(**{SINCE_UNITS[match.group(2)]: int(match.group(1))})).isoformat(timespec="milliseconds")
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ConfigError(f"--since {text!r}: not a time", hint="give 7d, 12h, 30m, 2w, or a date such as 2025-01-31 (UTC)") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return when.astimezone(timezone.utc).isoformat(timespec="milliseconds")


def target_names(text: str | None) -> tuple[str, ...]:
    """A target, a comma list or a group of targets/groups.yaml, as names (the target files need not exist any more)."""
    if not text:
        return ()
    from tools.targets import groups

    known = groups()
    names: list[str] = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        names.extend(m for m in known.get(part, [part]) if m not in names)
    return tuple(names)


def where(filters: Filters) -> tuple[str, list]:
    clauses, values = [], []
    if filters.pipeline:
        clauses.append("pipeline = ?")
        values.append(filters.pipeline)
    if filters.targets:
        clauses.append(f"target IN ({','.join('?' for _ in filters.targets)})")
        values.extend(filters.targets)
    if filters.release:
        clauses.append("release LIKE ? ESCAPE '\\'")
        values.append(filters.release.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%")
    if filters.since:
        clauses.append("started_at >= ?")
        values.append(filters.since)
    if filters.kind:
        clauses.append("kind = ?")
        values.append(filters.kind)
    if filters.device_class:
        clauses.append("device_class = ?")
        values.append(filters.device_class)
    return (" WHERE " + " AND ".join(clauses)) if clauses else "", values


def runs(connection: sqlite3.Connection, filters: Filters) -> list[dict]:
    """Matching runs, newest first, each with its end-to-end p50/p99 (from `stages`)."""
    clause, values = where(filters)
    limit = f" LIMIT {int(filters.limit)}" if filters.limit else ""
    sql = (
        f"SELECT {', '.join('r.' + f for f in RUN_FIELDS)}, s.p50_ms AS e2e_p50_ms, s.p99_ms AS e2e_p99_ms FROM "
        f"(SELECT * FROM runs{clause} ORDER BY started_at DESC, id DESC{limit}) r "
        "LEFT JOIN stages s ON s.run_id = r.id AND s.stage = 'end_to_end' ORDER BY r.started_at DESC, r.id DESC"
    )
    return [dict(row) for row in connection.execute(sql, values)]


def stage_rows(connection: sqlite3.Connection, run_ids: list[int]) -> dict[int, dict[str, dict]]:
    """run id -> stage -> its percentiles (for the trend page)."""
    out: dict[int, dict[str, dict]] = {}
    for first in range(0, len(run_ids), 900):  # SQLite's bound-parameter limit
        chunk = run_ids[first : first + 900]
        sql = f"SELECT run_id, stage, p50_ms, p99_ms, max_ms FROM stages WHERE run_id IN ({','.join('?' for _ in chunk)})"
        for run_id, stage, p50, p99, top in connection.execute(sql, chunk):
            out.setdefault(run_id, {})[stage] = {"p50_ms": p50, "p99_ms": p99, "max_ms": top}
    return out


def run_by_id(connection: sqlite3.Connection, run_id: int) -> dict | None:
    row = connection.execute(f"SELECT {', '.join(RUN_FIELDS)} FROM runs WHERE id = ?", (run_id,)).fetchone()
    return dict(row) if row is not None else None


def checks_of(connection: sqlite3.Connection, run_id: int) -> list[dict]:
    return [
        dict(row)
        for row in connection.execute(
            "SELECT name, status, measured, bound, limit_value, frames FROM checks WHERE run_id = ? ORDER BY rowid", (run_id,)
        )
    ]
