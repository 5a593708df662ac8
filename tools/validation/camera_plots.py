"""One latency plot per camera for report.html (a pipeline with several cameras).

The run's timeline keys each frame as `frame * cameras + camera index` (the cameras in the file's
order, as report.json's `cameras`), so a camera's frames are the keys with its index as remainder.
Each plot shows that camera's end-to-end latency from its own capture, its budgets (its own under
`budgets.cameras.NAME`, else the pipeline's) and its deadline."""

from __future__ import annotations

from tools.validation.plots import (
    _PLOTTING,
    BUDGET_COLOURS,
    _budget_lines,
    _latency_axis,
    _legend,
    _svg,
    figure_with_room,
    latencies_from_timeline,
    matplotlib,
)


def draw_camera_plots(report: dict, timeline: dict) -> dict[str, str]:
    """Inline SVG per camera name; empty for one camera (the run's own plot is that camera's)."""
    cameras = list(report.get("cameras") or {})
    if len(cameras) < 2:
        return {}
    data = latencies_from_timeline(timeline)
    keys, e2e = data["frames"], data["end_to_end"]
    plots = {}
    with _PLOTTING, matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "report"}):
        for index, name in enumerate(cameras):
            mine = keys % len(cameras) == index
            frames, values = keys[mine] // len(cameras), e2e[mine]
            section = report["cameras"][name]
            deadline = (section.get("deadline") or {}).get("deadline_ms")
            own = [c for c in report["checks"] if c["name"].startswith(f"cameras.{name}.end_to_end.")]
            checks = own or [c for c in report["checks"] if c["name"].startswith("end_to_end.")]
            budgets = {c["name"].rsplit(".", 1)[1]: c["limit"] for c in checks if c["name"].endswith("_ms")}
            budgets = {k: v for k, v in budgets.items() if isinstance(v, (int, float)) and k in BUDGET_COLOURS}
            figure, axis = figure_with_room(8.2, 3.0)
            axis.plot(frames, values, lw=0.8, color="tab:blue", label="end to end")
            _budget_lines(axis, budgets, deadline, vertical=False)
            if deadline is not None:
                late = values > deadline
                axis.scatter(frames[late], values[late], s=10, color="tab:red", zorder=3, label=f"{int(late.sum())} late")
            _latency_axis(axis, "y", [*values.tolist(), *budgets.values(), *([deadline] if deadline else [])], "end-to-end ms")
            axis.set(xlabel=f"{name}'s frame", title=f"camera {name}: latency per frame (from its own capture, the batch wait included)")
            _legend(axis)
            plots[name] = _svg(figure)
    return plots
