"""The DLA report as a rich table (host only) and as JSON."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console
from rich.table import Table

from tools.dla.analysis import DLA, DlaReport


def render_dla_report(console: Console, report: DlaReport, every_layer: bool = False) -> None:
    console.print(
        f"[bold]{report.model}[/]\n{report.platform}, TensorRT {report.tensorrt} (rules: {report.rule_source}), "
        f"{report.precision.upper()}; {report.availability}",
        highlight=False,
    )
    layers = report.layers if every_layer else tuple(v for v in report.layers if v.device != DLA)
    table = Table(title=f"{'every layer' if every_layer else 'layers that leave DLA'} ({len(layers)} of {len(report.layers)})")
    for column in ("#", "node", "op", "device", "subgraph", "reason"):
        table.add_column(column, overflow="fold")
    for verdict in layers:
        colour = "green" if verdict.device == DLA else "yellow"
        subgraph = "" if verdict.subgraph is None else str(verdict.subgraph)
        table.add_row(str(verdict.index), verdict.name, verdict.op, f"[{colour}]{verdict.device}[/]", subgraph, verdict.reason)
    if layers:
        console.print(table)
    summary = Table(title="DLA placement (predicted)", show_header=False)
    summary.add_column("what")
    summary.add_column("value", justify="right")
    sizes = ", ".join(str(len(g)) for g in report.subgraphs) or "-"
    for what, value in (
        ("layers", len(report.layers)),
        ("on DLA", report.dla_layers),
        ("on GPU", report.gpu_layers),
        ("DLA subgraphs (loadables)", f"{len(report.subgraphs)} (sizes {sizes}; at most {report.loadables_per_core} per core)"),
        ("GPU<->DLA transitions", report.transitions),
        ("engine inputs/outputs on DLA", report.io_boundaries),
        ("reformat layers (at most)", report.reformats),
    ):
        summary.add_row(what, str(value))
    console.print(summary)
    for note in report.recommendations:
        console.print(f"[bold]recommend:[/] {note}", highlight=False)


def write_dla_json(report: DlaReport, path: Path) -> None:
    from tools.output_paths import write_output

    write_output(Path(path), json.dumps(report.as_dict(), indent=2) + "\n", "--json")
