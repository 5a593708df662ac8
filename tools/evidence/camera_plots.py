"""One latency plot per camera for report.html (a pipeline with several cameras).

The run's timeline keys each frame as `frame * cameras + camera index` (the cameras in the file's
order, as report.json's `cameras`), so a camera's frames are the keys with its index as remainder.
Each plot shows that camera's end-to-end latency from its own capture, its budgets (its own under
`budgets.cameras.NAME`, else the pipeline's) and its deadline."""

from __future__ import annotations

from tools.reports.plots import BUDGET_COLOURS, latencies_from_timeline, latency_per_frame


def draw_camera_plots(report: dict, timeline: dict) -> dict[str, str]:
    """Inline SVG per camera name; empty for one camera (the run's own plot is that camera's)."""
    cameras = list(report.get("cameras") or {})
    if len(cameras) < 2:
        return {}
    data = latencies_from_timeline(timeline)
    keys, e2e = data["frames"], data["end_to_end"]
    plots = {}
    for index, name in enumerate(cameras):
        mine = keys % len(cameras) == index
        frames, values = keys[mine] // len(cameras), e2e[mine]
        section = report["cameras"][name]
        deadline = (section.get("deadline") or {}).get("deadline_ms")
        own = [c for c in report["checks"] if c["name"].startswith(f"cameras.{name}.end_to_end.")]
        checks = own or [c for c in report["checks"] if c["name"].startswith("end_to_end.")]
        budgets = {c["name"].rsplit(".", 1)[1]: c["limit"] for c in checks if c["name"].endswith("_ms")}
        budgets = {k: v for k, v in budgets.items() if isinstance(v, (int, float)) and k in BUDGET_COLOURS}
        title = f"camera {name}: latency per frame (from its own capture, the batch wait included)"
        plots[name] = latency_per_frame(frames, values, budgets, deadline, (8.2, 3.0), f"{name}'s frame", title)
    return plots
