"""The plots a reviewer reads: latency timeline, per-stage CDF, histogram with budget lines, miss streaks.

Drawn from timeline.npz (every measured frame), not from the summary, so what is plotted is what
was measured. Each plot is also saved as a PNG beside the report.
"""

from __future__ import annotations

import threading
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no display on a build server
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from sdk.runtime.recorder import latencies_from_times  # noqa: E402
from sdk.runtime.statistics import deadline_misses  # noqa: E402

BUDGET_COLOURS = {"p50_ms": "tab:green", "p99_ms": "tab:orange", "p999_ms": "tab:red", "p9999_ms": "darkred", "max_ms": "black"}


def latencies_from_timeline(timeline: dict) -> dict[str, np.ndarray]:
    """(frames, per-stage and end-to-end ms) of the measured frames, warm-up excluded."""
    warmup = int(timeline["warmup"])
    latencies = latencies_from_times(timeline["times_ns"][warmup:], tuple(timeline["stages"].tolist()))
    return {"frames": timeline["frames"][warmup:], **latencies}


def _legend(axis, **kwargs) -> None:
    if axis.get_legend_handles_labels()[0]:  # a run with no measured frames has nothing to label
        axis.legend(fontsize=8, **kwargs)


def _save(figure, folder: Path, name: str) -> str:
    figure.tight_layout()
    figure.savefig(folder / name, dpi=110)
    plt.close(figure)
    return name


# Matplotlib (pyplot's state, its text parser) is not thread-safe, and a fleet deploys targets in a
# thread pool: one target's plots at a time.
_PLOTTING = threading.Lock()


def draw_plots(report: dict, timeline: dict, folder: Path) -> dict[str, str]:
    """PNG file names by plot, written into `folder`."""
    with _PLOTTING:
        return _draw_plots(report, timeline, folder)


def _draw_plots(report: dict, timeline: dict, folder: Path) -> dict[str, str]:
    data = latencies_from_timeline(timeline)
    frames, e2e = data["frames"], data["end_to_end"]
    deadline = (report.get("deadline") or {}).get("deadline_ms")
    budgets = {c["name"].split(".", 1)[1]: c["limit"] for c in report["checks"] if c["name"].startswith("end_to_end.") and c["name"].endswith("_ms")}
    pngs = {}

    figure, axis = plt.subplots(figsize=(10, 3.6))
    axis.plot(frames, e2e, lw=0.8, color="tab:blue", label="end to end")
    if deadline is not None:
        late = e2e > deadline
        axis.axhline(deadline, color="tab:red", ls="--", lw=1, label=f"deadline {deadline:g} ms")
        axis.scatter(frames[late], e2e[late], s=10, color="tab:red", zorder=3, label=f"{int(late.sum())} late")
    axis.set(xlabel="source frame", ylabel="ms", title="latency per frame (from capture / scheduled time)")
    _legend(axis, loc="upper right")
    pngs["timeline"] = _save(figure, folder, "latency_timeline.png")

    figure, axis = plt.subplots(figsize=(7, 4.2))
    for stage in [*timeline["stages"].tolist(), "queue", "end_to_end"]:
        values = np.sort(data[stage])
        if len(values):
            axis.plot(values, np.arange(1, len(values) + 1) / len(values), lw=1.6 if stage == "end_to_end" else 1, label=stage)
    axis.set_xscale("log")
    axis.set(xlabel="ms (log)", ylabel="fraction of frames", title="latency CDF per stage")
    _legend(axis)
    pngs["cdf"] = _save(figure, folder, "stage_cdf.png")

    figure, axis = plt.subplots(figsize=(7, 4.2))
    if len(e2e):
        axis.hist(e2e, bins=min(80, max(10, len(e2e) // 5)), color="tab:blue", alpha=0.75)
    for key, limit in budgets.items():
        axis.axvline(limit, color=BUDGET_COLOURS.get(key, "grey"), ls="--", lw=1, label=f"{key} budget {limit:g}")
    if deadline is not None:
        axis.axvline(deadline, color="tab:red", lw=1.2, label=f"deadline {deadline:g}")
    axis.set(xlabel="end-to-end ms", ylabel="frames", title="end-to-end latency with budgets")
    _legend(axis)
    pngs["histogram"] = _save(figure, folder, "latency_histogram.png")

    if deadline is not None and len(frames):
        misses = deadline_misses(frames, e2e, deadline)
        figure, axis = plt.subplots(figsize=(10, 1.9))
        axis.imshow(misses.miss_flags[None, :], aspect="auto", cmap="Reds", vmin=0, vmax=1, extent=(frames.min(), frames.max() + 1, 0, 1))
        axis.set_yticks([])
        axis.set(xlabel="source frame", title=f"deadline misses (late or dropped): {misses.misses}, longest streak {misses.longest_streak}")
        pngs["misses"] = _save(figure, folder, "miss_streaks.png")
    return pngs
