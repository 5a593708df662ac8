"""report.html: the page a safety reviewer reads and signs: verdict, every check, statistics, environment, plots.

One self-contained file (plots inline as SVG, no script, no stylesheet or image fetched from anywhere)
that can be attached to a review. Its header block says who ran what, where, when and with which
software (report.json's `run`).
"""

from __future__ import annotations

import json
from html import escape
from pathlib import Path

from sdk.runtime.report import REPORT_FILE, preprocess_line
from sdk.runtime.timeline import TIMELINE_FILE, read_timeline
from sdk.runtime.verdict import check_unit, format_number
from sdk.sinks.files import write_whole
from tools.evidence.camera_plots import draw_camera_plots
from tools.reports.plots import draw_plots

HTML_FILE = "report.html"
COLOURS = {"PASS": "#1b7f3b", "FAIL": "#b3261e", "INCONCLUSIVE": "#9a6700", "WARN": "#9a6700", "UNVERIFIED": "#9a6700"}
STYLE = """
body{font-family:system-ui,sans-serif;margin:2em;color:#222;max-width:1100px}
table{border-collapse:collapse;margin:0.6em 0 1.4em}td,th{border:1px solid #ccc;padding:3px 8px;font-size:13px;text-align:right}
td:first-child,th:first-child{text-align:left}.verdict{font-size:28px;font-weight:bold;padding:8px 16px;color:white;display:inline-block}
svg{max-width:100%;height:auto;border:1px solid #eee;margin:6px 0;display:block}code{font-size:12px}
.run td,.run th,.checks td:last-child{text-align:left}.detail{font-size:18px;margin-left:12px;color:#9a6700;font-weight:bold}
.flag{color:#b3261e;font-weight:bold}
"""


def _cell(value, unit: str = "") -> str:
    if value is None:
        return "&ndash;"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return escape(format_number(value) + (f" {unit}" if unit else ""))
    return escape(str(value))


def _table(headers: list[str], rows: list[list], css: str = "") -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows)
    attributes = f' class="{css}"' if css else ""
    return f"<table{attributes}><tr>{head}</tr>{body}</table>"


def _status(status: str) -> str:
    return f'<b style="color:{COLOURS.get(status, "#222")}">{escape(status)}</b>'


def _checks(report: dict) -> str:
    rows = []
    for c in report["checks"]:
        unit = check_unit(c["name"])
        status = "UNVERIFIED" if c.get("unverified") else c["status"]
        rows.append(
            [
                escape(c["name"]),
                _status(status) + (f" ({escape(c['status'])})" if status != c["status"] else ""),
                _cell(c["measured"]) if c["measured"] is not None else "not measured",
                _cell(c["limit"]),
                escape(unit),
                _cell(c.get("bound")),
                _cell(c["frames"]),
                _cell(c["frames_needed"]),
                _cell(c.get("duration_s")),
                escape(c.get("detail", "")),
            ]
        )
    return _table(["check", "status", "measured", "limit", "unit", "95% bound", "frames", "frames needed", "duration s", "detail"], rows, "checks")


RUN_ROWS = (
    ("started_at", "started (UTC)"),
    ("finished_at", "finished (UTC)"),
    ("host", "host"),
    ("user", "user"),
    ("command", "command"),
    ("target", "target"),
    ("device_host", "device host"),
    ("device_fingerprint_sha256", "device fingerprint sha256"),
    ("pipeline", "pipeline"),
    ("pipeline_file", "pipeline file"),
    ("pipeline_sha256", "pipeline sha256"),
    ("release", "release"),
    ("release_manifest_sha256", "release manifest sha256"),
    ("sdk_version", "SDK version"),
    ("sdk_commit", "SDK commit"),
    ("inference_runtime", "inference runtime"),
    ("onnxruntime", "ONNX Runtime"),
    ("tensorrt", "TensorRT"),
    ("cuda", "CUDA"),
)
CODE = {"command", "device_fingerprint_sha256", "pipeline_sha256", "release_manifest_sha256", "sdk_commit", "release"}


def _run(report: dict) -> str:
    """The header block: who ran what, where, when, with which software ("not used"/"unknown" said, never blank)."""
    run = report.get("run") or {}
    rows = []
    for key, label in RUN_ROWS:
        value = run.get(key)
        if value is None:
            text = "not used" if key in ("tensorrt", "cuda", "onnxruntime") and run else "unknown"
            rows.append([escape(label), f"<i>{text}</i>"])
        else:
            rows.append([escape(label), f"<code>{escape(str(value))}</code>" if key in CODE else escape(str(value))])
    return '<table class="run">' + "".join(f"<tr><th>{a}</th><td>{b}</td></tr>" for a, b in rows) + "</table>"


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


def _load(report: dict) -> str:
    """CPU load and frequency sampled while the pipeline ran, flagged when the load was over the core count."""
    during = (report.get("environment") or {}).get("during")
    if not during:
        return "<p>CPU load during the run: not recorded.</p>"
    load = during.get("load_1m") or {}
    mhz = during.get("cpu_mhz") or {}
    flag = ' <span class="flag">over the core count: other work competed with the pipeline</span>' if during.get("overloaded") else ""
    rows = [
        ["1-min load average, max (mean)", f"{_cell(load.get('max'))} ({_cell(load.get('mean'))}) on {_cell(during.get('cpus'))} CPU(s){flag}"],
        ["CPU busy", _cell(during.get("cpu_busy_percent"), "%")],
        ["CPU frequency min / mean / max", " / ".join(_cell(mhz.get(k), "MHz") for k in ("min", "mean", "max"))],
        ["samples", f"{_cell(during.get('samples'))} over {_cell(during.get('seconds'), 's')}"],
    ]
    return _table(["during the run", "value"], rows)


def _accuracy(report: dict) -> str:
    accuracy = report["accuracy"]
    compared = accuracy.get("compared") or {}
    parts = []
    if compared:
        parts.append(
            f"<p><b>Compared:</b> {escape(compared['reference'])} (reference) with {escape(compared['run'])}. "
            + (f'<span class="flag">{escape(compared["summary"])}</span>' if compared.get("trivial") else escape(compared["summary"]))
            + "</p>"
        )
    keys = ("frames", "reference_detections", "run_detections", "matched", "recall", "precision", "mean_iou", "mean_score_drift")
    parts.append(_table(["", "value"], [[escape(k.replace("_", " ")), _cell(accuracy.get(k))] for k in keys]))
    if accuracy.get("cameras"):  # each camera against its own reference frames, under its own thresholds
        shown = ("frames", "recall", "precision", "mean_iou", "mean_score_drift")
        rows = [
            [escape(name), *(_cell(c.get(k)) for k in shown), _cell((c.get("thresholds") or {}).get("min_recall"))]
            for name, c in accuracy["cameras"].items()
        ]
        parts.append(_table(["camera", *(k.replace("_", " ") for k in shown), "min recall"], rows))
    return "".join(parts)


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


def _cameras(report: dict) -> str:
    rows = []
    for name, c in report["cameras"].items():
        e2e = c["end_to_end"]
        rows.append([name, c["frames"], e2e.get("p50_ms"), e2e.get("p99_ms"), e2e.get("max_ms"), c["dropped"], c["skipped_slots"], c["misses"]])
    note = (report.get("batching") or {}).get("note", "")
    headers = ["camera", "frames", "p50 ms", "p99 ms", "max ms", "dropped", "skipped slots", "deadline misses"]
    return f"<p>{escape(note)}</p>" + _table(headers, [[escape(str(r[0]))] + [_cell(v) for v in r[1:]] for r in rows])


def write_html(folder: Path) -> Path:
    """Render report.html from report.json and timeline.npz in `folder` (atomically), plots inline."""
    folder = Path(folder)
    report = json.loads((folder / REPORT_FILE).read_text())
    timeline_path = folder / TIMELINE_FILE
    timeline = read_timeline(timeline_path) if timeline_path.is_file() else None
    plots = draw_plots(report, timeline) if timeline is not None else {}
    per_camera = draw_camera_plots(report, timeline) if timeline is not None else {}
    verdict = report["verdict"]
    detail = report.get("verdict_detail") or verdict
    parts = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>{escape(report['pipeline'])} on {escape(report['target'])}: "
        f"{escape(detail)}</title>",
        f"<style>{STYLE}</style></head><body>",
        f"<h1>{escape(report['pipeline'])} on {escape(report['target'])}</h1>",
        f'<div class="verdict" style="background:{COLOURS.get(verdict, "#444")}">{escape(verdict)}</div>'
        + (f'<span class="detail">{escape(detail[len(verdict) :].lstrip(", "))}</span>' if detail != verdict else ""),
        "<h2>Run</h2>",
        _run(report),
        f"<p>preprocessing on {escape(preprocess_line(report.get('preprocess')))}</p>",
        f"<p>backend {escape(str(report.get('backend')))}; "
        f"{_cell(report['measured_frames'])} frames measured after {_cell(report['warmup_frames'])} warm-up, {_cell(report['dropped'])} dropped, "
        f"{_cell(report.get('corrupt_frames', 0))} corrupt; confidence {report.get('confidence', 0.95):.0%} "
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
                [[_cell(d[k]) for k in ("deadline_ms", "frames", "late", "dropped", "miss_ratio", "longest_streak")]],
            )
        )
    parts += ["<h3>CPU load during the run</h3>", _load(report)]
    for title, key in (("Plots", "timeline"), ("", "histogram"), ("", "cdf"), ("", "misses")):
        if title:
            parts.append(f"<h2>{title}</h2>")
        if key in plots:
            parts.append(f'<figure aria-label="{escape(key)}">{plots[key]}</figure>')
    if per_camera:
        parts.append("<h2>Cameras</h2>" + _cameras(report))
        for name, svg in per_camera.items():
            parts.append(f'<figure aria-label="latency {escape(name)}">{svg}</figure>')
    if report.get("accuracy"):
        parts += ["<h2>Accuracy</h2>", _accuracy(report)]
    if report.get("determinism_runs"):
        parts.append(f"<h2>Determinism runs</h2><pre>{escape(json.dumps(report['determinism_runs'], indent=2))}</pre>")
    parts += ["<h2>Environment and provenance</h2>", _environment(report), "</body></html>"]
    final = folder / HTML_FILE
    write_whole(final, "\n".join(parts))
    return final
