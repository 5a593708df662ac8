"""report.html: the page a safety reviewer reads and signs: verdict, every check, statistics, environment, plots."""

from __future__ import annotations

import json
from html import escape
from pathlib import Path

from sdk.runtime.report import REPORT_FILE
from sdk.runtime.timeline import TIMELINE_FILE, read_timeline
from sdk.sinks.files import partial_path, publish
from tools.validation.plots import draw_plots

HTML_FILE = "report.html"
COLOURS = {"PASS": "#1b7f3b", "FAIL": "#b3261e", "INCONCLUSIVE": "#9a6700", "WARN": "#9a6700"}
STYLE = """
body{font-family:system-ui,sans-serif;margin:2em;color:#222;max-width:1100px}
table{border-collapse:collapse;margin:0.6em 0 1.4em}td,th{border:1px solid #ccc;padding:3px 8px;font-size:13px;text-align:right}
td:first-child,th:first-child{text-align:left}.verdict{font-size:28px;font-weight:bold;padding:8px 16px;color:white;display:inline-block}
img{max-width:100%;border:1px solid #eee;margin:6px 0}code{font-size:12px}
"""


def _cell(value) -> str:
    if value is None:
        return "&ndash;"
    if isinstance(value, float):
        return f"{value:.4g}"
    return escape(str(value))


def _table(headers: list[str], rows: list[list]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _status(status: str) -> str:
    return f'<b style="color:{COLOURS.get(status, "#222")}">{escape(status)}</b>'


def _checks(report: dict) -> str:
    rows = [
        [
            escape(c["name"]),
            _status(c["status"]),
            _cell(c["measured"]),
            _cell(c["limit"]),
            _cell(c.get("bound")),
            c["frames"],
            _cell(c["frames_needed"]),
            escape(c.get("detail", "")),
        ]
        for c in report["checks"]
    ]
    return _table(["check", "status", "measured", "limit", "95% bound", "frames", "frames needed", "detail"], rows)


def _latency(report: dict) -> str:
    rows = []
    groups = [*report["stages"].items(), ("queue", report["queue"]), ("end to end", report["end_to_end"])]
    for name, stats in groups:
        bounds = stats.get("bounds", {})
        p99 = bounds.get("p99_ms") or [None, None]
        rows.append(
            [
                escape(name),
                _cell(stats.get("p50_ms")),
                _cell(stats.get("p99_ms")),
                _cell(p99[0]),
                _cell(p99[1]),
                _cell(stats.get("p999_ms")),
                _cell(stats.get("max_ms")),
                _cell(stats.get("mean_ms")),
            ]
        )
    return _table(["stage", "p50 ms", "p99 ms", "p99 lower", "p99 upper", "p99.9 ms", "max ms", "mean ms"], rows)


def _environment(report: dict) -> str:
    env = report["environment"]
    rows = [[escape(k), _cell(env.get(k))] for k in ("sdk", "python", "machine", "system", "cpus")]
    for moment in ("before", "after"):
        facts = env.get(moment) or {}
        for key in ("power_mode", "clocks_locked", "cpu_governors", "max_temperature_c", "load_1m", "model", "l4t"):
            value = facts.get(key)
            rows.append([f"{moment}: {escape(key)}", _cell(json.dumps(value) if isinstance(value, (dict, list)) else value)])
    for key, value in (report.get("hashes") or {}).items():
        rows.append([escape(key), f"<code>{escape(str(value))}</code>"])
    rows.append(["output digest", f"<code>{escape(str((report.get('determinism') or {}).get('digest')))}</code>"])
    rows.append(["interference", _cell(json.dumps(report.get("interference")))])
    return _table(["", "value"], rows)


def write_html(folder: Path) -> Path:
    """Render report.html and its PNGs from report.json and timeline.npz in `folder` (atomically)."""
    folder = Path(folder)
    report = json.loads((folder / REPORT_FILE).read_text())
    timeline_path = folder / TIMELINE_FILE
    pngs = draw_plots(report, read_timeline(timeline_path), folder) if timeline_path.is_file() else {}
    verdict = report["verdict"]
    parts = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>{escape(report['pipeline'])} on {escape(report['target'])}: {verdict}</title>",
        f"<style>{STYLE}</style></head><body>",
        f"<h1>{escape(report['pipeline'])} on {escape(report['target'])}</h1>",
        f'<div class="verdict" style="background:{COLOURS.get(verdict, "#444")}">{escape(verdict)}</div>',
        f"<p>release <code>{escape(str(report.get('release')))}</code>, backend {escape(str(report.get('backend')))}; "
        f"{report['measured_frames']} frames measured after {report['warmup_frames']} warm-up, {report['dropped']} dropped, "
        f"{report.get('corrupt_frames', 0)} corrupt; confidence {report.get('confidence', 0.95):.0%} "
        "(one-sided, distribution-free order-statistic bounds).</p>",
        "<h2>Checks</h2>",
        _checks(report),
    ]
    if report["notes"]:
        parts.append("<ul>" + "".join(f"<li>{escape(n)}</li>" for n in report["notes"]) + "</ul>")
    parts += ["<h2>Latency</h2>", _latency(report)]
    if report.get("deadline"):
        d = report["deadline"]
        parts.append(
            _table(
                ["deadline ms", "frames", "late", "dropped", "miss ratio", "longest streak"],
                [[_cell(d["deadline_ms"]), d["frames"], d["late"], d["dropped"], _cell(d["miss_ratio"]), d["longest_streak"]]],
            )
        )
    for title, key in (("Plots", "timeline"), ("", "histogram"), ("", "cdf"), ("", "misses")):
        if title:
            parts.append(f"<h2>{title}</h2>")
        if key in pngs:
            parts.append(f'<img src="{escape(pngs[key])}" alt="{escape(key)}">')
    for section in ("determinism_runs", "accuracy"):
        if report.get(section):
            parts.append(f"<h2>{escape(section.replace('_', ' '))}</h2><pre>{escape(json.dumps(report[section], indent=2))}</pre>")
    parts += ["<h2>Environment and provenance</h2>", _environment(report), "</body></html>"]
    final = folder / HTML_FILE
    partial = partial_path(final)
    partial.write_text("\n".join(parts))
    publish(partial, final)
    return final
