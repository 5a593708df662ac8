"""The plots a reviewer reads: latency timeline, per-stage CDF, histogram with budget lines, miss streaks.

Drawn from timeline.npz (every measured frame), not from the summary, so what is plotted is what
was measured. Each plot is an SVG document (a string) that report.html embeds: the page is one file
that can be attached to a review. Every latency plot shows the budgets; when the measured
latencies and the budgets span more than a factor of LOG_SPAN the latency axis is logarithmic, so a
run far over (or far under) its budget keeps both the data and the budget lines legible. Legends
sit outside the axes, never over the data.
"""

from __future__ import annotations

import io
import re
import threading

import matplotlib

matplotlib.use("Agg")  # files only: no display on a build server
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.ticker import FuncFormatter  # noqa: E402

from sdk.runtime.recorder import latencies_from_times  # noqa: E402
from sdk.runtime.statistics import deadline_misses  # noqa: E402
from sdk.runtime.verdict import format_number  # noqa: E402

BUDGET_COLOURS = {"p50_ms": "tab:green", "p99_ms": "tab:orange", "p999_ms": "tab:red", "p9999_ms": "darkred", "max_ms": "black"}
LOG_SPAN = 20.0  # largest / smallest value on a latency axis beyond which it is drawn logarithmic
MARGIN_IN = {"left": 0.85, "right": 0.25, "bottom": 0.55, "top": 0.35}  # tick labels, axis labels and the title
LEGEND_IN = 2.2  # right of the axes: the widest legend entry ("p9999 budget 12,345.6 ms") at font size 8
PEOPLE = FuncFormatter(lambda value, _: format_number(value))  # tick labels without 1e+05


def latencies_from_timeline(timeline: dict) -> dict[str, np.ndarray]:
    """(frames, per-stage and end-to-end ms) of the measured frames, warm-up excluded."""
    warmup = int(timeline["warmup"])
    latencies = latencies_from_times(timeline["times_ns"][warmup:], tuple(timeline["stages"].tolist()))
    return {"frames": timeline["frames"][warmup:], **latencies}


def _legend(axis) -> None:
    if axis.get_legend_handles_labels()[0]:  # a run with no measured frames has nothing to label
        axis.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, frameon=False)


def figure_with_room(width: float, height: float, legend: bool = True):
    """(figure, axis): `width` x `height` inches for the axes and their labels (fixed margins), plus room on the
    right for the legend that `_legend` puts outside the axes. A fixed layout draws the figure once; `bbox_inches="tight"` drew it
    twice (once to measure), which was half the report's plotting time."""
    right = LEGEND_IN if legend else MARGIN_IN["right"]
    total_w, total_h = width + right, height
    figure, axis = plt.subplots(figsize=(total_w, total_h))
    figure.subplots_adjust(
        left=MARGIN_IN["left"] / total_w,
        right=1 - right / total_w,
        bottom=MARGIN_IN["bottom"] / total_h,
        top=1 - MARGIN_IN["top"] / total_h,
    )
    return figure, axis


def _svg(figure) -> str:
    """The figure as an inline <svg> element (no XML prolog, no external reference, no date)."""
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg", metadata={"Date": None, "Creator": None})
    plt.close(figure)
    text = buffer.getvalue()
    return text[text.index("<svg") :]


def _use_log(values: list[float]) -> bool:
    positive = [v for v in values if v is not None and v > 0 and np.isfinite(v)]
    return bool(positive) and max(positive) / min(positive) > LOG_SPAN


def _latency_axis(axis, which: str, values: list[float], label: str) -> bool:
    """Log or linear, with human tick labels; returns whether it is logarithmic."""
    log = _use_log(values)
    if log:
        (axis.set_yscale if which == "y" else axis.set_xscale)("log")
        label += " (log scale)"
    (axis.set_ylabel if which == "y" else axis.set_xlabel)(label)
    getattr(axis, f"{which}axis").set_major_formatter(PEOPLE)
    return log


def _budget_lines(axis, budgets: dict[str, float], deadline: float | None, vertical: bool) -> None:
    line = axis.axvline if vertical else axis.axhline
    for key, limit in budgets.items():
        line(limit, color=BUDGET_COLOURS.get(key, "grey"), ls="--", lw=1, label=f"{key.removesuffix('_ms')} budget {format_number(limit)} ms")
    if deadline is not None:
        line(deadline, color="tab:red", lw=1.2, label=f"deadline {format_number(deadline)} ms")


# Matplotlib (pyplot's state, its text parser) is not thread-safe, and a fleet deploys targets in a
# thread pool: one target's plots at a time.
_PLOTTING = threading.Lock()


def draw_plots(report: dict, timeline: dict) -> dict[str, str]:
    """Inline SVG documents by plot name: timeline, cdf, histogram and (with a deadline) misses."""
    with _PLOTTING, matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "report"}):
        return _draw_plots(report, timeline)


def _draw_plots(report: dict, timeline: dict) -> dict[str, str]:
    data = latencies_from_timeline(timeline)
    frames, e2e = data["frames"], data["end_to_end"]
    deadline = (report.get("deadline") or {}).get("deadline_ms")
    budgets = {c["name"].split(".", 1)[1]: c["limit"] for c in report["checks"] if c["name"].startswith("end_to_end.") and c["name"].endswith("_ms")}
    budgets = {k: v for k, v in budgets.items() if isinstance(v, (int, float)) and k in BUDGET_COLOURS}
    limits = [*budgets.values(), *([deadline] if deadline is not None else [])]
    plots = {}

    figure, axis = figure_with_room(8.2, 3.6)
    axis.plot(frames, e2e, lw=0.8, color="tab:blue", label="end to end")
    _budget_lines(axis, budgets, deadline, vertical=False)
    if deadline is not None:
        late = e2e > deadline
        axis.scatter(frames[late], e2e[late], s=10, color="tab:red", zorder=3, label=f"{int(late.sum())} late")
    _latency_axis(axis, "y", [*e2e.tolist(), *limits], "end-to-end ms")
    axis.set(xlabel="source frame", title="latency per frame (from capture / scheduled time)")
    _legend(axis)
    plots["timeline"] = _svg(figure)

    figure, axis = figure_with_room(6.4, 4.2)
    shown: list[float] = list(limits)
    for stage in [*timeline["stages"].tolist(), "queue", "end_to_end"]:
        values = np.sort(data[stage])
        values = values[values > 0]  # a zero-length stage has no place on a log axis
        if len(values):
            axis.plot(values, np.arange(1, len(values) + 1) / len(values), lw=1.6 if stage == "end_to_end" else 1, label=stage)
            shown += [float(values[0]), float(values[-1])]
    _budget_lines(axis, budgets, deadline, vertical=True)
    axis.set_xscale("log")
    axis.xaxis.set_major_formatter(PEOPLE)
    axis.set(xlabel="ms (log scale)", ylabel="fraction of frames", title="latency CDF per stage, end-to-end budgets")
    _legend(axis)
    plots["cdf"] = _svg(figure)

    figure, axis = figure_with_room(6.4, 4.2)
    log = _use_log([*e2e.tolist(), *limits])
    if len(e2e):
        bins = min(80, max(10, len(e2e) // 5))
        low, high = min([float(e2e.min()), *limits]), max([float(e2e.max()), *limits])
        edges = np.geomspace(max(low, 1e-3), high, bins + 1) if log else bins
        axis.hist(e2e, bins=edges, color="tab:blue", alpha=0.75, label=f"{len(e2e)} frames")
    _budget_lines(axis, budgets, deadline, vertical=True)
    _latency_axis(axis, "x", [*e2e.tolist(), *limits], "end-to-end ms")
    axis.set(ylabel="frames", title="end-to-end latency with budgets")
    _legend(axis)
    plots["histogram"] = _svg(figure)

    if deadline is not None and len(frames):
        misses = deadline_misses(frames, e2e, deadline)
        figure, axis = figure_with_room(9.4, 1.9, legend=False)
        axis.imshow(misses.miss_flags[None, :], aspect="auto", cmap="Reds", vmin=0, vmax=1, extent=(frames.min(), frames.max() + 1, 0, 1))
        axis.set_yticks([])
        axis.set(xlabel="source frame", title=f"deadline misses (late or dropped): {misses.misses}, longest streak {misses.longest_streak}")
        plots["misses"] = _svg(figure)
    return {name: _strip_ids(name, svg) for name, svg in plots.items()}


def _strip_ids(name: str, svg: str) -> str:
    """Several SVGs share one page: prefix their element ids (and references to them) so none collide."""
    return re.sub(r'(id="|href="#|url\(#)', lambda m: f"{m.group(1)}{name}-", svg)
