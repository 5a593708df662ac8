"""`sdk history --html`: one self-contained page of trends over the runs a query selects.

End-to-end p50 and p99 by run, coloured by release; deadline misses and accuracy by release; p99 by device. Inline
SVG (the SDK's own chart writer, no script, nothing fetched), with the table of runs below the plots.
"""

from __future__ import annotations

from html import escape
from pathlib import Path

import numpy as np

from sdk.runtime.verdict import format_number
from tools.output_paths import write_output
from tools.reports.plots import strip_ids, use_log
from tools.reports.svg_chart import CYCLE, Axis, Chart

STYLE = (
    "body{font-family:sans-serif;margin:1.5em;max-width:80em}table{border-collapse:collapse;font-size:0.85em}"
    "td,th{border:1px solid #ccc;padding:2px 6px;text-align:left}.PASS{color:#080}.FAIL{color:#b00}.INCONCLUSIVE{color:#a60}"
)
MAX_RELEASES = 12  # colours in one legend; older releases are grouped as "other"


def _short(release: str | None) -> str:
    return (release or "none")[:12]


def _release_order(runs: list[dict]) -> list[str]:
    """Releases oldest first by their first run, the newest MAX_RELEASES kept apart."""
    first: dict[str, str] = {}
    for run in runs:
        key, when = _short(run["release"]), run["started_at"] or ""
        if key not in first or when < first[key]:
            first[key] = when
    return sorted(first, key=first.get)[-MAX_RELEASES:]


def _categories(chart: Chart, names: list[str]) -> None:
    """Label the x axis's whole-number ticks with `names` (one category at each index)."""
    chart.x_formatter = lambda v: names[int(round(v))] if abs(v - round(v)) < 1e-9 and 0 <= round(v) < len(names) else ""


def _strip_plot(groups: list[tuple[str, list[float]]], ylabel: str, title: str) -> str:
    """Each group's values as a column of points at its index, its median as a short black bar."""
    values = [v for _, vs in groups for v in vs]
    chart = Chart(7.0, 3.2)
    chart.axes(Axis([-0.5, len(groups) - 0.5], False, pad=0.0), Axis(values or [0.0, 1.0], use_log(values)))
    for index, (name, vs) in enumerate(groups):
        if vs:
            jitter = np.linspace(-0.15, 0.15, len(vs)) if len(vs) > 1 else np.zeros(1)
            chart.points(index + jitter, vs, CYCLE[index % len(CYCLE)], f"{name} ({len(vs)})")
            chart.line([index - 0.3, index + 0.3], [float(np.median(vs))] * 2, "black")
    _categories(chart, [name for name, _ in groups])
    chart.title, chart.ylabel = title, ylabel
    return chart.svg()


def _by_release(runs: list[dict], order: list[str], value) -> list[tuple[str, list[float]]]:
    return [(release, [v for v in (value(r) for r in runs if _short(r["release"]) == release) if v is not None]) for release in order]


def draw(runs: list[dict]) -> dict[str, str]:
    """Inline SVGs by name; `runs` oldest first, each with `e2e_p50_ms`, `e2e_p99_ms` and the run's columns."""
    plots: dict[str, str] = {}
    order = _release_order(runs)
    values = [r[k] for r in runs for k in ("e2e_p50_ms", "e2e_p99_ms") if r[k] is not None]
    chart = Chart(8.2, 3.6)
    chart.axes(Axis([0, max(len(runs) - 1, 1)], False, whole=True), Axis(values or [0.0, 1.0], use_log(values)))  # runs are counted
    for key, name in (("e2e_p50_ms", "p50"), ("e2e_p99_ms", "p99")):
        picked = [(i, r[key]) for i, r in enumerate(runs) if r[key] is not None]
        if picked:
            chart.line(*zip(*picked, strict=True), "grey" if name == "p50" else "black", name, width=0.8, dashed=name == "p50")
    for index, release in enumerate(order):
        picked = [(i, r[k]) for i, r in enumerate(runs) for k in ("e2e_p50_ms", "e2e_p99_ms") if _short(r["release"]) == release and r[k] is not None]
        if picked:
            chart.points(*zip(*picked, strict=True), CYCLE[index % len(CYCLE)], release)
    chart.title, chart.xlabel, chart.ylabel = "end-to-end p50 and p99 by run and release", "run (oldest first)", "end-to-end ms"
    plots["trend"] = chart.svg()
    plots["p99"] = _strip_plot(_by_release(runs, order, lambda r: r["e2e_p99_ms"]), "end-to-end p99 ms", "p99 by release")
    if any(r["miss_ratio"] is not None for r in runs):
        plots["misses"] = _strip_plot(_by_release(runs, order, lambda r: r["miss_ratio"]), "deadline miss ratio", "deadline misses by release")
    if any(r["recall"] is not None for r in runs):
        plots["accuracy"] = _strip_plot(_by_release(runs, order, lambda r: r["recall"]), "recall against FP32", "accuracy (recall) by release")
    targets = sorted({r["target"] or "?" for r in runs})
    by_target = [(t, [r["e2e_p99_ms"] for r in runs if (r["target"] or "?") == t and r["e2e_p99_ms"] is not None]) for t in targets]
    plots["devices"] = _strip_plot(by_target, "end-to-end p99 ms", "p99 by device")
    return {name: strip_ids(name, svg) for name, svg in plots.items()}


def _cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return escape(format_number(value))  # 10,670, never 1.067e+04
    return escape(str(value))


def write_page(runs: list[dict], path: Path, title: str) -> Path:
    """The page for `runs` (newest first, as `sdk history` lists them), written atomically to `path`."""
    oldest_first = list(reversed(runs))
    plots = draw(oldest_first) if runs else {}
    columns = ("id", "started_at", "kind", "target", "device_class", "release", "verdict", "e2e_p50_ms", "e2e_p99_ms", "miss_ratio", "recall")
    rows = "".join(
        "<tr>"
        + "".join(f"<td class='{escape(str(r.get(c)))}'>{_cell(r.get(c))}</td>" if c == "verdict" else f"<td>{_cell(r.get(c))}</td>" for c in columns)
        + "</tr>"
        for r in runs
    )
    body = "".join(f"<figure>{svg}</figure>" for svg in plots.values()) or "<p>No runs match.</p>"
    html = (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{escape(title)}</title><style>{STYLE}</style></head><body>"
        f"<h1>{escape(title)}</h1><p>{len(runs)} run(s).</p>{body}"
        f"<table><tr>{''.join(f'<th>{c}</th>' for c in columns)}</tr>{rows}</table></body></html>\n"
    )
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_output(path, html, "--html")
    return path
