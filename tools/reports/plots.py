"""The plots a reviewer reads: latency timeline, per-stage CDF, histogram with budget lines, miss streaks.

Drawn from timeline.npz (every measured frame), not from the summary, so what is plotted is what
was measured. Each plot is an SVG document (a string, tools/reports/svg_chart.py) that report.html
embeds: the page is one file that can be attached to a review. Every latency plot shows the budgets;
when the measured latencies and the budgets span more than a factor of LOG_SPAN the latency axis is
logarithmic, so a run far over (or far under) its budget keeps both the data and the budget lines
legible. Legends sit outside the axes, never over the data.
"""

from __future__ import annotations

import re

import numpy as np

from sdk.runtime.recorder import latencies_from_times
from sdk.runtime.statistics import deadline_misses
from sdk.runtime.verdict import format_number
from tools.reports.svg_chart import CYCLE, Axis, Chart

BUDGET_COLOURS = {"p50_ms": "tab:green", "p99_ms": "tab:orange", "p999_ms": "tab:red", "p9999_ms": "darkred", "max_ms": "black"}
LOG_SPAN = 20.0  # largest / smallest value on a latency axis beyond which it is drawn logarithmic


def latencies_from_timeline(timeline: dict) -> dict[str, np.ndarray]:
    """(frames, per-stage and end-to-end ms) of the measured frames, warm-up excluded."""
    warmup = int(timeline["warmup"])
    latencies = latencies_from_times(timeline["times_ns"][warmup:], tuple(timeline["stages"].tolist()))
    return {"frames": timeline["frames"][warmup:], **latencies}


def use_log(values: list[float]) -> bool:
    positive = [v for v in values if v is not None and v > 0 and np.isfinite(v)]
    return bool(positive) and max(positive) / min(positive) > LOG_SPAN


def latency_label(label: str, log: bool) -> str:
    return label + (" (log scale)" if log else "")


def budget_lines(chart: Chart, budgets: dict[str, float], deadline: float | None, vertical: bool) -> None:
    for key, limit in budgets.items():
        chart.rule(limit, BUDGET_COLOURS.get(key, "grey"), f"{key.removesuffix('_ms')} budget {format_number(limit)} ms", vertical=vertical)
    if deadline is not None:
        chart.rule(deadline, "tab:red", f"deadline {format_number(deadline)} ms", vertical=vertical, dashed=False, width=1.2)


def latency_per_frame(frames: np.ndarray, e2e: np.ndarray, budgets: dict, deadline: float | None, size: tuple, xlabel: str, title: str) -> str:
    """End-to-end latency against the frame number, with the budgets, the deadline and the late frames."""
    limits = [*budgets.values(), *([deadline] if deadline is not None else [])]
    log = use_log([*e2e.tolist(), *limits])
    chart = Chart(*size)
    chart.axes(Axis(frames.tolist() or [0, 1], False), Axis([*e2e.tolist(), *limits], log))
    chart.line(frames, e2e, "tab:blue", "end to end", width=0.8)
    budget_lines(chart, budgets, deadline, vertical=False)
    if deadline is not None:
        late = e2e > deadline
        chart.points(frames[late], e2e[late], "tab:red", f"{int(late.sum())} late")
    chart.title, chart.xlabel, chart.ylabel = title, xlabel, latency_label("end-to-end ms", log)
    return chart.svg()


def draw_plots(report: dict, timeline: dict) -> dict[str, str]:
    """Inline SVG documents by plot name: timeline, cdf, histogram and (with a deadline) misses."""
    data = latencies_from_timeline(timeline)
    frames, e2e = data["frames"], data["end_to_end"]
    deadline = (report.get("deadline") or {}).get("deadline_ms")
    budgets = {c["name"].split(".", 1)[1]: c["limit"] for c in report["checks"] if c["name"].startswith("end_to_end.") and c["name"].endswith("_ms")}
    budgets = {k: v for k, v in budgets.items() if isinstance(v, (int, float)) and k in BUDGET_COLOURS}
    limits = [*budgets.values(), *([deadline] if deadline is not None else [])]
    title = "latency per frame (from capture / scheduled time)"
    plots = {"timeline": latency_per_frame(frames, e2e, budgets, deadline, (8.2, 3.6), "source frame", title)}
    plots["cdf"] = _cdf(data, [*timeline["stages"].tolist(), "queue", "end_to_end"], budgets, deadline, limits)
    plots["histogram"] = _histogram(e2e, budgets, deadline, limits)
    if deadline is not None and len(frames):
        misses = deadline_misses(frames, e2e, deadline)
        chart = Chart(9.4, 1.9, legend=False)
        start, end = float(frames.min()), float(frames.max()) + 1
        chart.axes(Axis([start, end], False, pad=0.0), Axis([0.0, 1.0], False, pad=0.0))
        chart.cells(start, (end - start) / len(misses.miss_flags), misses.miss_flags, "tab:red")
        chart.title = f"deadline misses (late or dropped): {misses.misses}, longest streak {misses.longest_streak}"
        chart.xlabel = "source frame"
        plots["misses"] = chart.svg(y_ticks=False)
    return {name: strip_ids(name, svg) for name, svg in plots.items()}


def _cdf(data: dict, stages: list[str], budgets: dict, deadline: float | None, limits: list[float]) -> str:
    shown: list[float] = list(limits)
    series = []
    for stage in stages:
        values = np.sort(data[stage])
        values = values[values > 0]  # a zero-length stage has no place on a log axis
        if len(values):
            series.append((stage, values))
            shown += [float(values[0]), float(values[-1])]
    chart = Chart(6.4, 4.2)
    chart.axes(Axis(shown, True), Axis([0.0, 1.0], False))
    for number, (stage, values) in enumerate(series):
        fraction = np.arange(1, len(values) + 1) / len(values)
        chart.line(values, fraction, CYCLE[number % len(CYCLE)], stage, width=1.6 if stage == "end_to_end" else 1.0)
    budget_lines(chart, budgets, deadline, vertical=True)
    chart.title, chart.xlabel, chart.ylabel = "latency CDF per stage, end-to-end budgets", "ms (log scale)", "fraction of frames"
    return chart.svg()


def _histogram(e2e: np.ndarray, budgets: dict, deadline: float | None, limits: list[float]) -> str:
    log = use_log([*e2e.tolist(), *limits])
    chart = Chart(6.4, 4.2)
    counts, edges = np.zeros(0), np.zeros(1)
    if len(e2e):
        bins = min(80, max(10, len(e2e) // 5))
        low, high = min([float(e2e.min()), *limits]), max([float(e2e.max()), *limits])
        edges = np.geomspace(max(low, 1e-3), high, bins + 1) if log else np.histogram_bin_edges(e2e, bins)
        counts, edges = np.histogram(e2e, bins=edges)
    chart.axes(Axis([*edges.tolist(), *limits], log), Axis([0, *(counts.tolist() or [1])], False))
    if len(e2e):
        chart.bars(edges, counts, "tab:blue", f"{len(e2e)} frames")
    budget_lines(chart, budgets, deadline, vertical=True)
    chart.title, chart.xlabel, chart.ylabel = "end-to-end latency with budgets", latency_label("end-to-end ms", log), "frames"
    return chart.svg()


def strip_ids(name: str, svg: str) -> str:
    """Several SVGs share one page: prefix their element ids (and references to them) so none collide."""
    return re.sub(r'(id="|href="#|url\(#)', lambda m: f"{m.group(1)}{name}-", svg)
