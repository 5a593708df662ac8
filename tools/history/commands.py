"""The command line of the history: `sdk history [index DIR]` and `sdk compare A [B]` (registered by tools/cli/parser.py)."""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

from rich.console import Console
from rich.table import Table

from sdk.errors import EXIT_BUDGET_FAIL, EXIT_PASS, ConfigError

VERDICT_STYLE = {"PASS": "green", "FAIL": "bold red", "INCONCLUSIVE": "yellow", "better": "green", "worse": "bold red", "same": "dim"}
DEFAULT_LIMIT = 50


def fraction(text: str) -> float:
    """`5%` or `0.05`: a share, from 0 to 1 (exclusive)."""
    try:
        value = float(text.strip().removesuffix("%")) / (100 if text.strip().endswith("%") else 1)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a share (e.g. 5% or 0.05)") from None
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 0 and below 100%")
    return value


def confidence(text: str) -> float:
    value = fraction(text)
    if not 0.5 <= value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: a confidence from 0.5 to below 1 (e.g. 0.95 or 95%)")
    return value


def add_parsers(commands) -> None:
    history = commands.add_parser("history", help="the runs kept in the history (reports/history.sqlite): a table, or a page of trends")
    history.add_argument("--pipeline", "-p", dest="pipeline_name", help="only this pipeline (its `name`)")
    history.add_argument("--target", "-t", help="only this target, comma list or group")
    history.add_argument("--release", "-r", help="only this release (an id or its prefix)")
    history.add_argument("--since", help="only runs started since: 7d, 12h, 30m, 2w, or a date (2025-01-31, UTC)")
    history.add_argument(
        "--kind", choices=("deploy", "validate", "selftest", "profile", "optimize", "evaluate", "run"), help="only runs of this command"
    )
    history.add_argument("--limit", type=int, default=DEFAULT_LIMIT, help=f"the newest N runs (default {DEFAULT_LIMIT}; 0: all)")
    history.add_argument("--json", action="store_true", help="the runs as JSON on stdout instead of the table")
    history.add_argument(
        "--html",
        type=Path,
        nargs="?",
        const=Path(),
        metavar="FILE",
        help="also write a page of trend plots (default: history.html beside the history)",
    )
    history.add_argument("--history", type=Path, metavar="FILE", help="the history database (default: $SDK_HISTORY, else reports/history.sqlite)")
    sub = history.add_subparsers(dest="history_command", metavar="SUBCOMMAND")
    index = sub.add_parser("index", help="index report folders written before (or without) the history")
    index.add_argument("folder", type=Path, metavar="DIR", help="a folder of report folders (searched below), or one report folder")
    index.add_argument("--history", type=Path, metavar="FILE", dest="index_history", help="the history database (default: as above)")
    compare = commands.add_parser("compare", help="latency, misses and accuracy of B against A, with confidence intervals and a verdict per figure")
    compare.add_argument("a", metavar="A", help="a report folder, a run id from `sdk history`, a release id, or `last-committed`")
    compare.add_argument("b", metavar="B", nargs="?", help="as A; with B alone given as A, A is the release committed before it on its device class")
    compare.add_argument("--json", action="store_true", help="the comparison as JSON: a `figures` list (name, a, b, difference, interval, verdict)")
    compare.add_argument("--confidence", type=confidence, default=0.95, help="of the intervals, simultaneous over the figures (default 0.95)")
    compare.add_argument(
        "--min-difference",
        type=fraction,
        default=0.0,
        metavar="SHARE",
        help="smallest latency or miss difference called better or worse, a share of A's value (default 0: any detectable one)",
    )
    compare.add_argument("--pipeline", "-p", dest="pipeline_name", help="release ids: only runs of this pipeline")
    compare.add_argument("--target", "-t", help="release ids: only runs on this target, comma list or group")
    compare.add_argument("--runs", type=int, default=5, help="release ids: the newest N runs of each (default 5)")
    compare.add_argument("--fail-on-worse", action="store_true", help="exit 3 when a figure is worse (default: 0 once compared)")
    compare.add_argument("--history", type=Path, metavar="FILE", help="the history database (default: $SDK_HISTORY, else reports/history.sqlite)")


def _path(given: Path | None) -> Path:
    from tools.history.store import HistoryError, history_path

    if given is not None:
        return given.resolve()
    path = history_path()
    if path is None:
        raise HistoryError("the history is off (SDK_HISTORY=off)", hint="unset SDK_HISTORY, or name a file with --history")
    return path


@contextmanager
def _database_errors(path_of) -> Iterator[None]:
    """An SQLite error while reading or indexing is the user's to act on: one error line naming the file."""
    from tools.history.store import HistoryError, problem

    try:
        yield
    except sqlite3.Error as exc:
        said = problem(exc, path_of())
        if said is not None:
            raise HistoryError(said, hint="free space on its disk, or set SDK_HISTORY (or --history) to a file in a writable folder") from None
        raise HistoryError(f"the history {path_of()} failed: {exc}", hint="retry; a damaged file: move it aside, sdk history index DIR") from None


def history(args: argparse.Namespace, console: Console) -> int:
    with _database_errors(lambda: _path(getattr(args, "index_history", None) or args.history)):
        return _history(args, console)


def _history(args: argparse.Namespace, console: Console) -> int:
    if args.history_command == "index":
        return index(args, console)
    from tools.history.query import Filters, parse_since, runs, target_names, where
    from tools.history.store import open_for_reading

    if args.limit < 0:
        raise ConfigError(f"--limit {args.limit}: give 0 (all) or a positive number", hint="--limit 20 shows the newest 20 runs; --limit 0 all")
    path = _path(args.history)
    page = None
    if args.html is not None:  # checked before the query: never over the history itself, never into a folder that refuses it
        from tools.output_paths import check_output_file

        page = path.with_suffix(".html") if args.html == Path() else args.html
        check_output_file(page, "--html", [(path, "the history database"), (Path(f"{path}-wal"), "the history's log")])
    filters = Filters(args.pipeline_name, target_names(args.target), args.release, parse_since(args.since), args.kind, limit=args.limit or None)
    with closing(open_for_reading(path)) as connection:
        clause, values = where(filters)
        total = connection.execute(f"SELECT COUNT(*) FROM runs{clause}", values).fetchone()[0]
        found = runs(connection, filters)
    if args.json:
        console.print_json(json.dumps({"history": str(path), "matching": total, "runs": found}))
    else:
        _whole_rows(console)
        console.print(history_table(found))
        shown = f"the newest {len(found)} of {total}" if len(found) < total else f"{total}"
        sys.stderr.write(f"{shown} run(s) from {path}" + (" (--limit 0 shows all)" if len(found) < total else "") + "\n")
    if page is not None:
        from tools.history.trends import write_page

        what = ", ".join(
            f"{k} {v}" for k, v in (("pipeline", args.pipeline_name), ("target", args.target), ("release", args.release), ("since", args.since)) if v
        )
        write_page(found, page, f"Run history{': ' + what if what else ''}")
        sys.stderr.write(f"trends: {page}\n")
    return 0


def _whole_rows(console: Console) -> None:
    """Piped (a file, grep, a CI log): rows are never cut to 80 columns."""
    if not console.is_terminal:
        console.width = 400


def _ms(value) -> str:
    return "-" if value is None else f"{value:.2f}"


def history_table(found: list[dict]) -> Table:
    table = Table()
    for column in ("id", "started (UTC)", "kind", "target", "pipeline", "release", "verdict", "p50 ms", "p99 ms", "misses", "recall", "report"):
        table.add_column(column, justify="right" if column in ("id", "p50 ms", "p99 ms", "misses", "recall") else "left")
    for r in found:
        verdict = r["verdict"] or "-"
        table.add_row(
            str(r["id"]),
            (r["started_at"] or "-")[:19].replace("T", " "),
            r["kind"],
            r["target"] or "-",
            r["pipeline"] or "-",
            r["release"] or "-",
            f"[{VERDICT_STYLE.get(verdict, '')}]{verdict}[/]" if verdict in VERDICT_STYLE else verdict,
            _ms(r["e2e_p50_ms"]),
            _ms(r["e2e_p99_ms"]),
            "-" if r["miss_ratio"] is None else f"{r['miss_ratio']:.2%}",
            "-" if r["recall"] is None else f"{r['recall']:.3f}",
            _shown_path(r["report_dir"]),
        )
    return table


def _shown_path(path: str | None) -> str:
    """A report folder as a person types it: relative to the working folder where it lies below it."""
    if not path:
        return "-"
    try:
        return str(Path(path).relative_to(Path.cwd().resolve()))
    except ValueError:
        return path


def index(args: argparse.Namespace, console: Console) -> int:
    import os

    from tools.history.record import index_folders

    if not args.folder.is_dir():
        raise ConfigError(f"{args.folder} is not a folder", hint="name the folder that holds the report folders, e.g. reports/")
    if args.index_history is not None:
        os.environ["SDK_HISTORY"] = str(args.index_history.resolve())
    done = index_folders(args.folder)
    for folder, why in done.failed.items():
        sys.stderr.write(f"warning: {folder} not indexed: {why}\n")
    if done.unfinished:
        example = done.unfinished[0]
        sys.stderr.write(f"note: {len(done.unfinished)} report folder(s) skipped: their run stopped before its report (e.g. {example})\n")
    console.print(f"indexed {len(done.added)} report folder(s) from {args.folder} into {_path(args.index_history)}", highlight=False)
    return 0


def compare(args: argparse.Namespace, console: Console) -> int:
    with _database_errors(lambda: _path(args.history)):
        return _compare(args, console)


def _compare(args: argparse.Namespace, console: Console) -> int:
    from tools.history.compare import compare as run_compare
    from tools.history.query import Filters, target_names
    from tools.history.resolve import LAST_COMMITTED, resolve_pair
    from tools.history.store import HistoryError, open_for_reading

    if args.runs < 1:
        raise ConfigError(f"--runs {args.runs}: give 1 or more", hint="--runs 5 compares the newest 5 runs of each release (the default)")
    spec_a, spec_b = (args.a, args.b) if args.b is not None else (LAST_COMMITTED, args.a)
    filters = Filters(pipeline=args.pipeline_name, targets=target_names(args.target))
    path = _path(args.history)
    try:
        connection = open_for_reading(path)
    except HistoryError:
        connection = None  # two report folders compare without a history
    try:
        a, b = resolve_pair(connection, spec_a, spec_b, filters, args.runs)
        spreads = _spreads(connection, a, b)
    finally:
        if connection is not None:
            connection.close()
    result = run_compare(a, b, confidence=args.confidence, min_difference=args.min_difference, spreads=spreads)
    if args.json:
        console.print_json(json.dumps(result))
    else:
        _whole_rows(console)
        render(console, result)
    return EXIT_BUDGET_FAIL if args.fail_on_worse and result["summary"]["worse"] else EXIT_PASS


def _spreads(connection, a, b) -> dict:
    """The run-to-run spread of B's pipeline on the device classes the compared runs ran on, from the history."""
    if connection is None:
        return {}
    from tools.history.noise import spreads

    classes = set()
    for side in (a, b):
        for entry, run in zip(side.entries or [None] * len(side.runs), side.runs, strict=False):
            if entry is not None:
                classes.add(entry["device_class"])
            elif run.folder is not None:
                row = connection.execute("SELECT device_class FROM runs WHERE report_dir = ?", (str(run.folder.resolve()),)).fetchone()
                classes.add(row[0] if row is not None else None)
    pipeline = b.runs[0].report.get("pipeline")
    classes.discard(None)
    if not classes or pipeline is None:
        return {}
    return spreads(connection, pipeline, classes)


def render(console: Console, result: dict) -> None:
    def side(s: dict) -> str:
        runs = s["runs"]
        what = f"release {s['release']}" if s["release"] else "runs of several releases"
        return f"{s['spec']} ({what}, {len(runs)} run(s){', on ' + runs[0]['target'] if runs and runs[0]['target'] else ''})"

    console.print(f"A: {side(result['a'])}\nB: {side(result['b'])}", highlight=False, soft_wrap=True)
    for what in result.get("different") or ():
        console.print(f"[bold yellow]warning[/]: A and B are different work ({what}): the figures compare different things", soft_wrap=True)
    table = Table(title=f"B against A at {result['confidence']:g} confidence (simultaneous), minimum difference {result['min_difference']:.0%}")
    for column in ("figure", "A", "B", "B - A", "interval", "verdict"):
        table.add_column(column, justify="left" if column in ("figure", "verdict", "interval") else "right")
    for f in result["figures"]:
        number = "{:.4g}".format
        interval = f"[{number(f['interval'][0])}, {number(f['interval'][1])}]" if f["interval"] else ""
        interval = interval or ("too few runs" if f.get("too_few_runs") else "-")
        relative = f" ({f['relative']:+.1%})" if f["relative"] is not None else ""
        table.add_row(
            f["name"],
            "-" if f["a"] is None else number(f["a"]),
            "-" if f["b"] is None else number(f["b"]),
            ("-" if f["difference"] is None else number(f["difference"])) + relative,
            interval,
            "[yellow]too few runs[/]" if f.get("too_few_runs") else f"[{VERDICT_STYLE[f['verdict']]}]{f['verdict']}[/]",
        )
    console.print(table)
    for note in result["notes"]:
        console.print(f"note: {note}", highlight=False, soft_wrap=True)
    worse, better = result["summary"]["worse"], result["summary"]["better"]
    console.print(f"worse: {', '.join(worse) or 'none'}; better: {', '.join(better) or 'none'}", highlight=False, soft_wrap=True)
