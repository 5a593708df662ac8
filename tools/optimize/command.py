"""The command line of `sdk optimize PIPELINE (--target T | --platform P) [--budget-ms X] [--min-recall R]
[--min-precision P]` (registered by tools/cli/parser.py)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console


def _share(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number from 0 to 1") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give a share from 0 to 1 (e.g. 0.95)")
    return value


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r}: give a positive number of milliseconds")
    return value


def _savings(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(v.strip().removesuffix("%")) / (100 if v.strip().endswith("%") else 1) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: a comma list of shares, e.g. 15%,25%,35%") from None
    if not values or not all(0 < v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: each share between 0 and 100 % (exclusive)")
    return values


def add_parsers(commands) -> None:
    optimize = commands.add_parser(
        "optimize", help="make the model fit its budget: channel pruning with reconstruction, FSKD, 2:4 sparsity; the accuracy-latency front"
    )
    optimize.add_argument("pipeline", type=Path, help="pipeline file (YAML) with a `calibration` section (its frames and held-out frames)")
    where = optimize.add_mutually_exclusive_group(required=True)
    where.add_argument("--target", "-t", help="the target it will run on (`local`: this CPU, measured)")
    where.add_argument("--platform", help="a platform to predict for (host, jetson-agx-orin, ...), no target file needed")
    optimize.add_argument("--budget-ms", type=_positive, metavar="X", help="the model's time to meet on the target (predicted; measured for local)")
    optimize.add_argument(
        "--min-recall", type=_share, metavar="R", help="the gate's recall against the original FP32 model (default: calibration.accuracy)"
    )
    optimize.add_argument("--min-precision", type=_share, metavar="P", help="the gate's precision (default: calibration.accuracy)")
    optimize.add_argument("--savings", type=_savings, metavar="LIST", help="predicted time savings to build a plan for (default 10%%,20%%,30%%)")
    optimize.add_argument("--calibration-frames", type=int, metavar="N", help="calibration frames for the least-squares fits (default 32)")
    optimize.add_argument("--holdout-frames", type=int, metavar="N", help="held-out frames the gate judges (default: calibration.holdout_frames)")
    optimize.add_argument("--rounds", type=int, metavar="N", help="alternating measurement rounds (default 7)")
    optimize.add_argument("--no-fskd", action="store_true", help="leave out the few-sample distillation candidates")
    optimize.add_argument("--no-sparsity", action="store_true", help="leave out the 2:4 sparsity candidates")
    optimize.add_argument(
        "--report-dir", type=Path, help="folder for report.json and report.html (default: reports/<pipeline>/<time>-<target>-optimize/)"
    )


def optimize(args: argparse.Namespace, console: Console) -> int:
    from sdk.errors import ConfigError
    from tools.console import RichProgress
    from tools.optimize.run import DEFAULT_CALIBRATION_FRAMES, DEFAULT_SAVINGS, Optimize, Settings

    for name in ("calibration_frames", "holdout_frames", "rounds"):
        value = getattr(args, name)
        if value is not None and not 1 <= value <= 10000:
            raise ConfigError(f"--{name.replace('_', '-')} {value}: out of range; allowed 1 to 10000", hint="the defaults suit most models")
    settings = Settings(
        target=args.target, platform=args.platform, budget_ms=args.budget_ms, min_recall=args.min_recall, min_precision=args.min_precision,
        savings=args.savings or DEFAULT_SAVINGS, calibration_frames=args.calibration_frames or DEFAULT_CALIBRATION_FRAMES,
        holdout_frames=args.holdout_frames, rounds=args.rounds or 7, fskd=not args.no_fskd, sparsity=not args.no_sparsity,
        report_dir=args.report_dir,
    )  # fmt: skip
    with RichProgress(console, heartbeat_s=heartbeat_s()) as progress:
        result = Optimize(args.pipeline, settings, progress)()
    render(console, result.report)
    sys.stderr.write(f"report: {result.report_dir}\n")
    return result.exit_code


HEARTBEAT_S = 30.0  # piped, a line for the step under way at least this often (SDK_PROGRESS_EVERY_S)


def heartbeat_s() -> float:
    import os

    try:
        value = float(os.environ.get("SDK_PROGRESS_EVERY_S", HEARTBEAT_S))
    except ValueError:
        return HEARTBEAT_S
    return value if 0.05 <= value <= 3600 else HEARTBEAT_S


def _number(value, digits: int) -> str:
    return f"{value:.{digits}f}" if isinstance(value, (int, float)) else "-"


def render(console: Console, report: dict) -> None:
    """The front as a table (candidate names in full: piped output is not cut to 80 columns), then notes and files."""
    from rich.table import Table

    original = report.get("original") or {}
    measured = (original.get("measured") or {}).get("median_ms")
    table = Table(title=f"sdk optimize {report.get('pipeline')} for {report.get('target')}: {report.get('verdict')}", title_justify="left")
    for column in ("candidate", "CPU ms", "speed-up", "predicted ms", "recall", "precision", "gate", "front"):
        table.add_column(column, justify="left" if column == "candidate" else "right", no_wrap=column == "candidate")
    table.add_row("original", _number(measured, 2), "1.00x", _number(original.get("predicted_ms"), 3), "1.000", "1.000", "", "")
    for c in report.get("candidates", []):
        m, a = c.get("measured") or {}, c.get("accuracy") or {}
        speedup = f"{m['speedup']:.2f}x" if isinstance(m.get("speedup"), (int, float)) else "-"
        table.add_row(
            c["name"] + (" (chosen)" if c["name"] == report.get("chosen") else ""), _number(m.get("median_ms"), 2), speedup,
            _number(c.get("predicted_ms"), 3), _number(a.get("recall"), 3), _number(a.get("precision"), 3),
            "PASS" if c.get("passed") else "fail", "yes" if c.get("on_front") else "",
        )  # fmt: skip
    if console.is_terminal:
        console.print(table)
    else:  # piped: the whole table, never columns cut to fit 80
        width = console.width
        console.width = max(width, 100 + max((len(c["name"]) for c in report.get("candidates", [])), default=8))
        console.print(table)
        console.width = width
    for note in report.get("notes", []):
        console.print(f"note: {note}", highlight=False, markup=False)
    outputs = report.get("outputs")
    if outputs:
        console.print(f"written: {outputs['model']}\n         {outputs['pipeline']}", highlight=False, markup=False)
