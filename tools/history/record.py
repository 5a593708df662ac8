"""A report folder as a row of the history, and the hook every measuring command calls when its report is final.

`record_run` never raises: a history that cannot be written (locked by another writer past the timeout, damaged,
on a full disk, written by a newer SDK) costs the run one `warning:` line on stderr saying why, never its verdict
or its exit code. `index_folders` indexes report folders written before (or without) the history:
`sdk history index DIR`.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sqlite3
import sys
from contextlib import closing
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from tools.history.store import HISTORY_FILE, NewerSchema, history_path, insert_run, open_for_writing, problem, timeout_s

KINDS = ("deploy", "validate", "selftest", "profile", "optimize", "evaluate")
REPORT_FILE = "report.json"
SELFTEST_FILE = "selftest.json"
DEVICE_FILE = "device.json"
FLEET_FILE = "fleet.json"
_KIND_IN_NAME = re.compile(r"-(" + "|".join(KINDS) + r")(-\d+)?$")
_RUN_FOLDER = re.compile(r"^\d{8}T\d{6}Z-")  # a run's own report folder (tools/reports/report_dirs.py)
_REPEAT = re.compile(r"^repeat-\d+$")  # a validation's determinism repeats belong to their run
STAGE_KEYS = ("p50_ms", "p99_ms", "p999_ms", "max_ms", "mean_ms")


@dataclass(frozen=True)
class Recorded:
    """What became of a run: its id in the history, or why it is not there (`reason`; None with recording off)."""

    run_id: int | None
    path: Path | None
    reason: str | None = None


@dataclass
class Indexed:
    added: list[int] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # folder -> why
    unfinished: list[str] = field(default_factory=list)  # report folders of runs stopped before their report (skipped)


def explain(exc: BaseException) -> str:
    """Why the history could not take a run, in words a person can act on."""
    text = str(exc)
    said = problem(exc, history_path() or Path(HISTORY_FILE))
    if said is not None:
        return f"{said}; set SDK_HISTORY to a file on a writable disk, or index the report folders later with `sdk history index`"
    if isinstance(exc, NewerSchema):
        return f"{text}; upgrade the SDK, or set SDK_HISTORY to another file"
    if isinstance(exc, sqlite3.OperationalError) and "locked" in text:
        return f"another writer held the database for over {timeout_s():g} s ({text}); index the folder later with `sdk history index`"
    if isinstance(exc, sqlite3.DatabaseError):
        return f"the database is damaged ({text}); move it aside and rebuild it with `sdk history index` over the report folders"
    if isinstance(exc, OSError):
        return f"{exc.strerror or text}: {exc.filename or ''}".rstrip(": ")
    return f"{type(exc).__name__}: {text}"


def record_run(folder: Path | None, kind: str, *, platform: str | None = None, fleet_dir: Path | None = None, result: dict | None = None) -> Recorded:
    """Index one finished run (its report folder; a selftest without one passes its `result`). Never raises."""
    path = history_path()
    if path is None:
        return Recorded(None, None)
    try:
        run, checks, stages = describe(folder, kind, platform=platform, fleet_dir=fleet_dir, result=result)
        with closing(open_for_writing(path)) as connection:
            run_id = insert_run(connection, run, checks, stages)
    except Exception as exc:  # noqa: BLE001 - whatever it is, the run goes on
        reason = explain(exc)
        sys.stderr.write(f"warning: this run was not recorded in the history {path}: {reason}\n")
        return Recorded(None, path, reason)
    return Recorded(run_id, path)


def describe(folder: Path | None, kind: str | None = None, *, platform=None, fleet_dir=None, result: dict | None = None) -> tuple[dict, list, dict]:
    """(run row, checks, stages) of a report folder (report.json, or selftest.json) and its device.json."""
    folder = Path(folder).resolve() if folder is not None else None
    raw = None
    if result is None:
        name = REPORT_FILE if (folder / REPORT_FILE).is_file() else SELFTEST_FILE
        raw = (folder / name).read_bytes()
        report = json.loads(raw)
    else:
        report = result
    device_raw = _read(folder / DEVICE_FILE) if folder is not None else None
    device = json.loads(device_raw) if device_raw else None
    if "checks" in report and "stages" not in report and "release" in report and "verdict" not in report:
        report = selftest_as_report(report)
        kind = kind or "selftest"
    run = report.get("run") or {}
    hashes = report.get("hashes") or {}
    target = report.get("target") or run.get("target")
    platform, module, power_mode, label = device_class(device, platform or _target_platform(target))
    deadline = report.get("deadline") or {}
    accuracy = report.get("accuracy") or {}
    if fleet_dir is None and folder is not None and (folder.parent / FLEET_FILE).is_file():
        fleet_dir = folder.parent
    row = {
        "report_dir": str(folder) if folder is not None else None,
        "report_sha256": hashlib.sha256(raw).hexdigest() if raw is not None else None,
        "kind": kind or kind_of(folder, run),
        "started_at": run.get("started_at") or _mtime(folder) or _now(),
        "finished_at": run.get("finished_at"),
        "recorded_at": _now(),
        "user": run.get("user"),
        "host": run.get("host"),
        "command_line": run.get("command"),
        "sdk_version": run.get("sdk_version") or (report.get("environment") or {}).get("sdk"),
        "sdk_commit": run.get("sdk_commit"),
        "target": target,
        "fingerprint_sha256": run.get("device_fingerprint_sha256") or (hashlib.sha256(device_raw).hexdigest() if device_raw else None),
        "platform": platform,
        "module": module,
        "power_mode": power_mode,
        "device_class": label,
        "pipeline": report.get("pipeline") or run.get("pipeline"),
        "pipeline_sha256": hashes.get("pipeline_sha256") or run.get("pipeline_sha256"),
        "release": report.get("release") or run.get("release"),
        "model_sha256": hashes.get("model_sha256"),
        "verdict": report.get("verdict"),
        "frames": report.get("frames"),
        "measured_frames": report.get("measured_frames"),
        "dropped": report.get("dropped"),
        "misses": deadline.get("misses"),
        "miss_ratio": deadline.get("miss_ratio"),
        **{key: accuracy.get(key) for key in ("recall", "precision", "mean_iou", "mean_score_drift")},
        "fleet_dir": str(Path(fleet_dir).resolve()) if fleet_dir is not None else None,
    }
    checks = [
        {
            "name": c.get("name"),
            "status": c.get("status"),
            "measured": _scalar(c.get("measured")),
            "bound": _scalar(c.get("bound")),
            "limit_value": _scalar(c.get("limit")),
            "frames": c.get("frames") if isinstance(c.get("frames"), int) else None,
        }
        for c in report.get("checks") or ()
        if c.get("name")
    ]
    stages = {name: {k: s.get(k) for k in STAGE_KEYS} for name, s in (report.get("stages") or {}).items() if isinstance(s, dict)}
    for name in ("end_to_end", "queue"):
        if isinstance(report.get(name), dict):
            stages[name] = {k: report[name].get(k) for k in STAGE_KEYS}
    return row, checks, stages


def selftest_as_report(result: dict) -> dict:
    """selftest.json as a report: FAIL if a check failed, INCONCLUSIVE if one was skipped, else PASS."""
    statuses = {c.get("status") for c in result.get("checks") or ()}
    verdict = "FAIL" if "FAIL" in statuses else "INCONCLUSIVE" if "SKIP" in statuses else "PASS"
    checks = [{"name": c.get("name"), "status": c.get("status"), "measured": None} for c in result.get("checks") or ()]
    return {"verdict": verdict, "target": result.get("target"), "release": result.get("release"), "checks": checks}


def device_class(device: dict | None, platform: str | None) -> tuple[str | None, str | None, str | None, str]:
    """(platform, module, power mode, label): devices of one class are expected to measure alike. The platform is
    the Jetson module's (from the probe), else the target file's, else `linux-generic` (the local target, as
    `sdk targets check` has it); the module is the Jetson module's name, else the CPU architecture."""
    device = device or {}
    module = device.get("module") if isinstance(device.get("module"), dict) else None
    platform = (module or {}).get("platform") or platform or ("linux-generic" if device else None)
    name = (module or {}).get("name") or device.get("arch")
    power = device.get("power_mode")
    return platform, name, power, "/".join(str(part) if part else "-" for part in (platform, name, power))


def kind_of(folder: Path | None, run: dict) -> str:
    """deploy, validate, ...: from the default folder name (`<UTC>-<target>-<kind>`), else from the command line."""
    for candidate in (folder, folder.parent if folder is not None else None):
        match = _KIND_IN_NAME.search(candidate.name) if candidate is not None else None
        if match:
            return match.group(1)
    words = str(run.get("command") or "").split()
    for word in words[:4]:
        if word in KINDS:
            return word
    return "run"


def index_folders(root: Path) -> Indexed:
    """Every report folder under `root` (report.json or selftest.json; determinism repeats excepted), one
    transaction each; a folder indexed before is left as it is unless its report changed."""
    path = history_path()
    if path is None:
        from tools.history.store import HistoryError

        raise HistoryError("recording is off (SDK_HISTORY=off): there is no history to index into", hint="unset SDK_HISTORY, or set it to a file")
    done = Indexed()
    folders = list(report_folders(Path(root)))
    done.unfinished = [str(f) for f in unfinished_folders(Path(root))]
    with closing(open_for_writing(path)) as connection:
        for folder in folders:
            try:
                done.added.append(insert_run(connection, *describe(folder)))
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
                done.failed[str(folder)] = explain(exc)
    return done


def report_folders(root: Path):
    for top, dirs, files in os.walk(root, followlinks=False):
        dirs[:] = sorted(d for d in dirs if not _REPEAT.match(d) and not d.startswith("."))
        if REPORT_FILE in files or SELFTEST_FILE in files:
            yield Path(top)


def unfinished_folders(root: Path):
    """Report folders a run left without its report: marked UNFINISHED (a profile or optimize stopped or killed), or
    named as a run's own folder (`<UTC time>-<target>-<command>`) with no report in it."""
    from tools.reports.report_dirs import UNFINISHED_FILE

    for top, dirs, files in os.walk(root, followlinks=False):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and not _REPEAT.match(d))
        if REPORT_FILE in files or SELFTEST_FILE in files:
            continue
        if UNFINISHED_FILE in files or (_RUN_FOLDER.match(Path(top).name) and _KIND_IN_NAME.search(Path(top).name)):
            yield Path(top)


def _target_platform(name: str | None) -> str | None:
    if not name or name == "local":
        return None
    try:
        from tools.targets import RemoteTarget, resolve_target

        target = resolve_target(name)
    except Exception:  # noqa: BLE001 - a target file that is gone or broken: the probe's facts decide
        return None
    return target.spec.platform if isinstance(target, RemoteTarget) else None


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def _mtime(folder: Path | None) -> str | None:
    if folder is None:
        return None
    return datetime.fromtimestamp(folder.stat().st_mtime, timezone.utc).isoformat(timespec="milliseconds")


def _scalar(value):
    if value is None or isinstance(value, (int, float, str)):
        return value
    return json.dumps(value, sort_keys=True)
