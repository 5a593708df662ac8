"""Report folders: every run its own, so no file of an earlier run ever sits beside a new report.

By default a run writes `reports/<pipeline>/<UTC time>-<target>-<command>/` and, once its report
is complete, `reports/<pipeline>/latest` links to it. A folder named with --report-dir must be
empty (or not exist yet); one that already holds files is refused unless --force, which empties it.
"""

from __future__ import annotations

import os
import re
import shutil
from datetime import datetime, timezone
from pathlib import Path

from sdk.errors import ConfigError

REPORTS = Path("reports")
LATEST = "latest"
REPORT_MARKERS = ("report.json", "junit.xml", "report.html", "fleet.json")


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "unnamed"


def run_folder_name(target: str | None, command: str, now: datetime | None = None) -> str:
    """`20250131T081502Z-orin-01-validate`: sorts by time, names what ran where."""
    stamp = (now or datetime.now(timezone.utc)).strftime("%Y%m%dT%H%M%SZ")
    return "-".join([stamp, *([_slug(target)] if target else []), _slug(command)])


def new_run_folder(pipeline_name: str, target: str | None, command: str, base: Path = REPORTS) -> Path:
    """A folder no run has used yet under base/<pipeline>/ (not created: a run that fails early leaves nothing)."""
    parent = Path(base) / _slug(pipeline_name)
    name = run_folder_name(target, command)
    folder, n = parent / name, 1
    while folder.exists() or folder.is_symlink():
        n += 1
        folder = parent / f"{name}-{n}"
    return folder


def default_report_dir(pipeline, target: str | None = None, command: str = "deploy") -> Path:
    """A folder of this run's own for a pipeline file (sdk/spec's PipelineFile): reports/<pipeline>/<UTC time>-<target>-<command>/."""
    return new_run_folder(pipeline.spec.name, target, command)


def _entries(folder: Path) -> list[Path]:
    try:
        return sorted(folder.iterdir())
    except FileNotFoundError:
        return []
    except NotADirectoryError:
        raise ConfigError(f"--report-dir {folder} is a file, not a folder", hint="name a folder for the report") from None


def check_report_dir(folder: Path, force: bool) -> Path:
    """Refuse (ConfigError) a named report folder that already holds files, unless `force`; nothing is
    changed here. Returns the folder, resolved."""
    from tools.output_paths import check_output_folder

    check_output_folder(folder, "--report-dir")  # a file, /proc, a read-only disk: refused before anything runs
    folder = Path(folder).resolve()
    entries = _entries(folder)
    if not entries:
        return folder
    if force:
        _refuse_to_empty(folder)
        return folder
    held = [e.name for e in entries if e.name in REPORT_MARKERS]
    what = f"holds a report ({', '.join(held)})" if held else f"is not empty ({len(entries)} entries, e.g. {entries[0].name})"
    raise ConfigError(
        f"--report-dir {folder} {what}: a new report must not sit beside an earlier run's files",
        hint="leave out --report-dir (each run gets its own folder under reports/), name an empty folder, or add --force to empty it first",
    )


def _refuse_to_empty(folder: Path) -> None:
    """--force empties a report folder, never a checkout, a home or a folder the command runs in."""
    cwd = Path.cwd().resolve()
    if folder == cwd or folder in cwd.parents or folder == Path.home().resolve() or (folder / ".git").exists() or folder == Path(folder.anchor):
        raise ConfigError(
            f"--force would empty {folder}, which is not a report folder (the working folder, one above it, a home or a checkout)",
            hint="name a folder that only holds reports",
        )


def empty_report_dir(folder: Path) -> None:
    """Remove everything in `folder` (for --force, after every refusal had its chance)."""
    for entry in _entries(folder):
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


UNFINISHED_FILE = "UNFINISHED"  # in a report folder while its run goes on; a run killed before its report leaves it


def mark_unfinished(folder: Path, command: str) -> None:
    """Say in `folder`, from the start of a long run, that its report is not written yet: a run that is killed leaves
    a folder that says what it is (and `sdk history index` counts it), never an unexplained one."""
    (Path(folder) / UNFINISHED_FILE).write_text(
        f"This {command} did not finish: it was stopped or failed before its report was written.\n"
        "What is here is what it left (raw measurements); nothing reads it. Remove the folder when done with it.\n"
    )


def mark_finished(folder: Path) -> None:
    (Path(folder) / UNFINISHED_FILE).unlink(missing_ok=True)


def update_latest(folder: Path) -> Path:
    """Point `<folder's parent>/latest` at `folder` (relative, replaced atomically)."""
    folder = Path(folder)
    link = folder.parent / LATEST
    temporary = folder.parent / f".{LATEST}-{os.getpid()}"
    temporary.unlink(missing_ok=True)
    temporary.symlink_to(folder.name, target_is_directory=True)
    os.replace(temporary, link)
    return link
