"""The profile's report: report.json (the contract: docs/reference/profile.md), report.html (the roofline with every
layer as a point, predicted against measured), and the terminal's table."""

from __future__ import annotations

import json
import math
from html import escape
from pathlib import Path

from tools.output_paths import write_output

PROFILE_FORMAT = 1
REPORT_FILE = "report.json"
HTML_FILE = "report.html"


def write_json(report: dict, path: Path, option: str = "report") -> Path:
    """The report as JSON at `path`, whole or not at all; a failure is one error line naming `option` and the path."""
    return write_output(Path(path), json.dumps(report, indent=1) + "\n", option)


def roofline_svg(report: dict) -> str:
    """Each layer at (intensity, achieved GFLOP/s), sized by its share; the engine's roofs where they are known. Written
    by the reports' own SVG writer (tools/reports/svg_chart.py): milliseconds, where matplotlib took seconds."""
    from tools.reports.svg_chart import Axis, Chart

    rows = [r for r in report["layers"] if r.get("intensity") and r.get("achieved_gflops")]
    xs, ys = [r["intensity"] for r in rows], [r["achieved_gflops"] for r in rows]
    roofs = report.get("prediction", {}).get("roofline") or {}
    roof = None
    if roofs.get("peak_gflops") and roofs.get("bandwidth_gbs"):
        ridge = roofs["peak_gflops"] / roofs["bandwidth_gbs"]
        roof = ([0.01, ridge, 10000.0], [0.01 * roofs["bandwidth_gbs"], roofs["peak_gflops"], roofs["peak_gflops"]])
    chart = Chart(5.5, 4.5)
    chart.axes(Axis(xs + (roof[0] if roof else []), log=True), Axis(ys + (roof[1] if roof else []), log=True))
    for bound, colour in {"compute": "tab:red", "memory": "tab:blue", "launch": "grey"}.items():
        chosen = [r for r in rows if r.get("bound") == bound]
        if chosen:
            radii = [math.sqrt((20 + 400 * r["share"]) / math.pi) for r in chosen]  # matplotlib's 20 + 400 x share pt², as an area
            chart.points([r["intensity"] for r in chosen], [r["achieved_gflops"] for r in chosen], colour,
                         f"{bound}-bound (predicted)", radii=radii, opacity=0.6)  # fmt: skip
    if roof:
        chart.line(*roof, "black", f"roof: {roofs['peak_gflops']:.0f} GFLOP/s, {roofs['bandwidth_gbs']:.0f} GB/s")
    chart.title, chart.xlabel, chart.ylabel = "roofline: each layer, measured", "arithmetic intensity (FLOP/byte)", "achieved GFLOP/s"
    return chart.svg()


def above_roof(report: dict) -> str | None:
    """Why layers plot above the roof, where some do (a roof a measured point passes is not a bound: say what it is)."""
    roofs = report.get("prediction", {}).get("roofline") or {}
    peak, bandwidth = roofs.get("peak_gflops"), roofs.get("bandwidth_gbs")
    if not peak or not bandwidth:
        return None
    rows = [r for r in report["layers"] if r.get("intensity") and r.get("achieved_gflops")]
    ratios = [r["achieved_gflops"] / min(peak, r["intensity"] * bandwidth) for r in rows]
    over = [x for x in ratios if x > 1.1]
    if not over:
        return None
    if report.get("prediction", {}).get("platform") == "host":
        what = ("the roof is this machine's rate on the SDK's reference convolution and copy, with the pipeline's threads, not the "
                "CPU's peak: kernels that suit the CPU better run faster")  # fmt: skip
    else:
        what = "the roof is the module's dense FP16 peak and memory bandwidth from its data sheet"
    return (
        f"{len(over)} of {len(rows)} layers plot above the roof (up to {max(over):.1f}x): {what}; and a layer's FLOPs are its nominal "
        "count (a Winograd or fused kernel does fewer), so its achieved GFLOP/s can exceed what the kernel computes"
    )


def overhead_text(total: dict) -> str:
    """The profiling overhead a frame; a negative difference is no overhead: the machine's speed changed between the runs."""
    overhead = total.get("profiling_overhead_ms")
    if overhead is None:
        return "profiling overhead - ms a frame"
    if overhead < 0:
        return (f"profiling overhead not measurable (the profiled runs took {-overhead:.3f} ms a frame less than the plain ones: "
                "the machine's speed changed between them; it is at most the noise of the two medians)")  # fmt: skip
    return f"profiling overhead {overhead:.3f} ms a frame"


def predicted_svg(report: dict) -> str:
    """Predicted against measured time per layer (log-log), the diagonal where they agree."""
    from tools.reports.svg_chart import Axis, Chart

    rows = [r for r in report["layers"] if r.get("predicted_ms") and r.get("measured_ms")]
    xs, ys = [r["measured_ms"] for r in rows], [r["predicted_ms"] for r in rows]
    chart = Chart(3.5, 4.5)
    chart.axes(Axis(xs + ys, log=True), Axis(xs + ys, log=True))
    if rows:
        chart.points(xs, ys, "tab:blue", radii=[2.1] * len(xs), opacity=0.6)
        low, high = min(xs + ys), max(xs + ys)
        chart.line([low, high], [low, high], "black", "predicted = measured", dashed=True)
    chart.title, chart.xlabel, chart.ylabel = "each layer: predicted against measured", "measured ms (median)", "predicted ms"
    return chart.svg()


def _table(headers: list[str], rows: list[list]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{escape('' if v is None else str(v))}</td>" for v in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def write_html(report: dict, folder: Path) -> Path:
    total = report["total"]
    summary = _table(
        ["measured ms", "predicted ms", "error", "Spearman", "top-5 overlap", "run median ms", "profiling overhead ms",
         "without the profiler: measured ms", "predicted ms", "error"],
        [[total["measured_ms"], total.get("predicted_ms"), total.get("error"), report["accuracy"].get("spearman"),
          report["accuracy"].get("top5_overlap"), total.get("run_median_ms"), _overhead_cell(total), total.get("unprofiled_median_ms"),
          total.get("predicted_plain_ms"), total.get("plain_error")]],
    )  # fmt: skip
    bottlenecks = _table(
        ["layer", "op", "ms", "share", "bound", "what would help"],
        [
            [b["name"][:80], b["op"], b["ms"], f"{b['share']:.1%}", b["bound"], " | ".join(a["text"] for a in b["advice"])]
            for b in report["bottlenecks"]
        ],
    )
    layers = _table(
        ["layer", "op", "measured ms", "p90 ms", "predicted ms", "ratio", "share", "GFLOP/s", "GB/s", "intensity", "bound"],
        [[r["name"][:80], r["op"], r["measured_ms"], r["measured_p90_ms"], r.get("predicted_ms"), r.get("ratio"), f"{r['share']:.1%}",
          r.get("achieved_gflops"), r.get("achieved_gbs"), r["intensity"], r.get("bound")] for r in report["layers"]],
    )  # fmt: skip
    notes = "".join(f"<li>{escape(n)}</li>" for n in [*report.get("notes", []), *_drawn_notes(report)])
    host = f"<p>host speed: {escape(report['host']['text'])}</p>" if report.get("host") else ""
    page = (
        "<!doctype html><html><head><meta charset='utf-8'><title>profile</title><style>"
        "body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px}table{border-collapse:collapse;margin:0.6em 0}"
        "td,th{border:1px solid #ccc;padding:2px 6px;font-size:12px}svg{max-width:100%;height:auto}</style></head><body>"
        f"<h1>Profile of {escape(report['pipeline'])} on {escape(report['target'])}</h1>"
        f"<p>{escape(report['runtime'])}, {escape(report['precision'])}, {report['frames']} frames; prediction: "
        f"{escape(str(report['prediction'].get('platform')))}</p>{summary}{host}<h2>Bottlenecks</h2>{bottlenecks}"
        f"<h2>Roofline</h2>{roofline_svg(report)}{predicted_svg(report)}<ul>{notes}</ul><h2>Layers</h2>{layers}</body></html>"
    )
    path = Path(folder) / HTML_FILE
    write_output(path, page, "the report folder")
    return path


def short_name(name: str, width: int = 48, among: list[str] | None = None) -> str:
    """A layer's name for a table: the shortest end of its first layer's path (two parts at least) that no other layer
    of `among` ends with, and how many more it fused. Never cut where the names differ: a long one keeps its
    distinguishing part and its last (`model.22/.../Conv`)."""
    parts = name.split(" + ")[0].split("/")
    others = [o.split(" + ")[0].split("/") for o in (among or []) if o != name]
    keep = min(2, len(parts))
    while keep < len(parts) and any(o[-keep:] == parts[-keep:] for o in others):
        keep += 1
    fused = name.count(" + ")
    tail = f" +{fused}" if fused else ""
    text = "/".join(parts[-keep:]) + tail
    if len(text) <= width or keep < 2:
        return text
    squeezed = f"{parts[-keep]}/.../{parts[-1]}{tail}"
    return squeezed if len(squeezed) <= width else "..." + text[-(width - 3) :]


def render_predicted_layers(console, report: dict) -> None:
    """`sdk predict --layers`: every predicted layer in the model's order, with the layers it holds (as a fused layer
    is named in trtexec's profile) and how it runs (one kernel, in place, a view, folded)."""
    from rich.table import Table

    table = Table(title=f"{report['pipeline']} on {report['platform']}: every predicted layer")
    for column in ("layer (fused)", "op", "engine", "predicted ms", "bound", "how it runs"):
        table.add_column(column, justify="right" if column == "predicted ms" else "left")
    for row in report["layers"]:
        how = (row.get("fusion") or "").split(":")[0]  # the JSON's `fusion` has the reason after the colon
        table.add_row(row["name"], row["op"], row["engine"], f"{row['predicted_ms']:.4f}", row["bound"], how)
    console.print(table)


def render(console, report: dict, top: int = 10) -> None:
    """The terminal: the slowest layers measured and predicted side by side, the totals, the bottlenecks."""
    from rich.table import Table

    table = Table(title=f"{report['pipeline']} on {report['target']}: {report['runtime']}, {report['precision']}, {report['frames']} frames")
    for column in ("layer", "op", "measured ms", "p90", "predicted ms", "ratio", "share", "bound"):
        table.add_column(column, no_wrap=True)
    names = [r["name"] for r in report["layers"]]
    if not console.is_terminal:
        console.width = max(console.width, 400)  # piped: whole rows, never cut at 80 columns
    for r in sorted(report["layers"], key=lambda r: -r["measured_ms"])[:top]:
        table.add_row(short_name(r["name"], among=names), r["op"], f"{r['measured_ms']:.3f}", f"{r['measured_p90_ms']:.3f}",
                      _num(r.get("predicted_ms")), _num(r.get("ratio"), 2), f"{r['share']:.1%}", r.get("bound") or "")  # fmt: skip
    console.print(table)
    total = report["total"]
    line = f"model: measured {total['measured_ms']:.2f} ms"
    if total.get("predicted_ms") is not None:
        line += f", predicted {total['predicted_ms']:.2f} ms ({total['error']:+.0%})"
        line += f"; layer ranking Spearman {report['accuracy']['spearman']:.2f}, top-5 overlap {report['accuracy']['top5_overlap']}/5"
    console.print(line, highlight=False)
    if report.get("host"):
        console.print(f"host speed: {report['host']['text']}", highlight=False, markup=False)
    console.print(f"whole runs: median {total['run_median_ms']:.2f} ms, p90 {total['run_p90_ms']:.2f} ms; {overhead_text(total)}", highlight=False)
    if total.get("plain_error") is not None:
        console.print(f"without the profiler: measured {total['unprofiled_median_ms']:.2f} ms, predicted {total['predicted_plain_ms']:.2f} ms "
                      f"({total['plain_error']:+.0%})", highlight=False)  # fmt: skip
    for number, item in enumerate(report["bottlenecks"][:3], 1):
        name = short_name(item["name"], 70, names)
        console.print(f"{number}. {name} ({item['op']}, {item['share']:.0%}, {item['bound'] or 'unknown'}-bound)", highlight=False)
        for advice in item["advice"]:
            console.print(f"   - {advice['text']}", highlight=False, markup=False)
    for note in [*report.get("notes", []), *_drawn_notes(report)]:
        console.print(f"note: {note}", highlight=False, markup=False)


def _drawn_notes(report: dict) -> list[str]:
    roof = above_roof(report)
    return [f"roofline: {roof}"] if roof else []


def _overhead_cell(total: dict):
    overhead = total.get("profiling_overhead_ms")
    return "not measurable (negative: the speed changed between runs)" if overhead is not None and overhead < 0 else overhead


def _num(value, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"
