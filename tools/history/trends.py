"""`sdk history --html`: one self-contained page of trends over the runs a query selects.

End-to-end p50 and p99 by run, coloured by release; deadline misses and accuracy by release; p99 by device. Inline
SVG (matplotlib, no script, nothing fetched), with the table of runs below the plots.
"""

from __future__ import annotations

from html import escape
from pathlib import Path

import numpy as np

from sdk.sinks.files import partial_path, publish
from tools.validation.plots import _PLOTTING, _legend, _strip_ids, _svg, figure_with_room

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


def _by_release_plot(runs: list[dict], order: list[str], value, ylabel: str, title: str, log: bool = False) -> str:
    figure, axis = figure_with_room(7.0, 3.2)
    for index, release in enumerate(order):
        values = [value(r) for r in runs if _short(r["release"]) == release]
        values = [v for v in values if v is not None]
        if values:
            jitter = np.linspace(-0.15, 0.15, len(values)) if len(values) > 1 else [0.0]
            axis.scatter(np.full(len(values), index) + jitter, values, s=14, label=f"{release} ({len(values)})")
            axis.plot([index - 0.3, index + 0.3], [float(np.median(values))] * 2, color="black", lw=1)
    axis.set_xticks(range(len(order)), order, rotation=30, fontsize=7, ha="right")
    if log:
        axis.set_yscale("log")
    axis.set(ylabel=ylabel, title=title)
    _legend(axis)
    return _svg(figure)


def draw(runs: list[dict]) -> dict[str, str]:
    """Inline SVGs by name; `runs` oldest first, each with `e2e_p50_ms`, `e2e_p99_ms` and the run's columns."""
    with _PLOTTING:
        return _draw(runs)


def _draw(runs: list[dict]) -> dict[str, str]:
    plots: dict[str, str] = {}
    order = _release_order(runs)
    figure, axis = figure_with_room(8.2, 3.6)
    x = np.arange(len(runs))
    for key, marker in (("e2e_p50_ms", "o"), ("e2e_p99_ms", "^")):
        for release in order:
            picked = [(i, r[key]) for i, r in zip(x, runs, strict=False) if _short(r["release"]) == release and r[key] is not None]
            if picked:
                axis.scatter(*zip(*picked, strict=False), s=12, marker=marker, label=f"{key[4:7]} {release}")
    positive = [r[k] for r in runs for k in ("e2e_p50_ms", "e2e_p99_ms") if r[k]]
    if positive and max(positive) / max(min(positive), 1e-9) > 20:
        axis.set_yscale("log")
    axis.set(xlabel="run (oldest first)", ylabel="end-to-end ms", title="end-to-end p50 (o) and p99 (^) by run and release")
    _legend(axis)
    plots["trend"] = _svg(figure)
    plots["p99"] = _by_release_plot(runs, order, lambda r: r["e2e_p99_ms"], "end-to-end p99 ms", "p99 by release")
    if any(r["miss_ratio"] is not None for r in runs):
        plots["misses"] = _by_release_plot(runs, order, lambda r: r["miss_ratio"], "deadline miss ratio", "deadline misses by release")
    if any(r["recall"] is not None for r in runs):
        plots["accuracy"] = _by_release_plot(runs, order, lambda r: r["recall"], "recall against FP32", "accuracy (recall) by release")
    targets = sorted({r["target"] or "?" for r in runs})
    figure, axis = figure_with_room(7.0, 3.2)
    for index, target in enumerate(targets):
        values = [r["e2e_p99_ms"] for r in runs if (r["target"] or "?") == target and r["e2e_p99_ms"] is not None]
        if values:
            axis.scatter(np.full(len(values), index), values, s=14, label=f"{target} ({len(values)})")
    axis.set_xticks(range(len(targets)), targets, rotation=30, fontsize=7, ha="right")
    axis.set(ylabel="end-to-end p99 ms", title="p99 by device")
    _legend(axis)
    plots["devices"] = _svg(figure)
    return {name: _strip_ids(name, svg) for name, svg in plots.items()}


def _cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4g}"
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
    partial = partial_path(path)
    partial.write_text(html)
    publish(partial, path)
    return path
