"""What `sdk evaluate` writes: report.json (everything), junit.xml (one case per budget, as every run's), report.html
(the figures, the per-class table and the precision-recall curves as SVG), and the short summary for stdout."""

from __future__ import annotations

import json
from html import escape
from pathlib import Path

from sdk.runtime.junit import write_junit
from sdk.runtime.report import write_report
from sdk.sinks.files import write_whole
from tools.reports.svg_chart import CYCLE, Axis, Chart

HTML_FILE = "report.html"
HEADLINE = (("map50_95", "mAP@[.5:.95]"), ("map50", "AP50"), ("map75", "AP75"), ("map_small", "AP small"), ("map_medium", "AP medium"))
HEADLINE += (("map_large", "AP large"), ("ar100", "AR@100"))


def _figure(value) -> str:
    return "n/a" if value is None else f"{value:.4f}"


def _interval(report: dict, name: str) -> str:
    interval = report["intervals"].get(name)
    return f" (95% interval {interval[0]:.4f} to {interval[1]:.4f})" if interval else ""


def summary(report: dict) -> list[str]:
    """A few lines for people: the headline figures with their intervals, the best and worst classes, the verdict."""
    labels = report["labels"]
    lines = [
        f"{report['pipeline']} on {labels['images_scored']} labelled images ({labels['format']}, {labels['labels']} labels), {report['evaluator']}",
        f"mAP@[.5:.95] {_figure(report['map50_95'])}{_interval(report, 'map50_95')}",
        f"AP50 {_figure(report['map50'])}{_interval(report, 'map50')}",
    ]
    stats = report["metrics"]
    lines.append(
        "AP75 {} | AP small {} medium {} large {} | AR@100 {}".format(
            *(_figure(stats[k]) for k in ("map75", "map_small", "map_medium", "map_large", "ar100"))
        )
    )
    scored = sorted((c for c in report["per_class"] if c["ap50_95"] is not None), key=lambda c: c["ap50_95"])
    if scored:
        lines.append(f"classes scored: {len(scored)}; lowest AP: " + ", ".join(f"{c['name']} {c['ap50_95']:.3f}" for c in scored[:3]))
    for check in report["checks"]:
        lines.append(f"{check['name']}: {check['status']} (minimum {check['limit']:g}, measured {_figure(check['measured'])}; {check['detail']})")
    lines.extend(f"note: {note}" for note in report["notes"])
    lines.append(f"verdict: {report['verdict_detail']}")
    return lines


def pr_chart(report: dict) -> str | None:
    """The precision-recall curves (mean over the scored classes) at IoU 0.5 and averaged over 0.5:0.95, as SVG."""
    curves = report.get("curves") or {}
    if not curves:
        return None
    chart = Chart(6.4, 4.2)
    chart.axes(Axis([0.0, 1.0], False), Axis([0.0, 1.0], False))
    chart.line(curves["recall"], curves["precision50"], CYCLE[0], f"IoU 0.5 (AP50 {_figure(report['map50'])})", width=1.6)
    chart.line(curves["recall"], curves["precision50_95"], CYCLE[1], f"IoU 0.5:0.95 (mAP {_figure(report['map50_95'])})", width=1.6)
    chart.title, chart.xlabel, chart.ylabel = "precision-recall, mean over classes", "recall", "interpolated precision"
    return chart.svg()


def html(report: dict) -> str:
    rows = "".join(
        f"<tr><td>{escape(c['name'])}</td><td>{c['category_id']}</td><td>{c['labels']}</td><td>{c['detections']}</td>"
        f"<td>{_figure(c['ap50_95'])}</td><td>{_figure(c['ap50'])}</td></tr>"
        for c in report["per_class"]
    )
    figures = "".join(
        f"<tr><td>{label}</td><td>{_figure(report['metrics'][key])}{escape(_interval(report, key))}</td></tr>" for key, label in HEADLINE
    )
    checks = "".join(f"<li>{escape(c['name'])}: <b>{c['status']}</b> ({escape(c['detail'])})</li>" for c in report["checks"])
    notes = "".join(f"<li>{escape(note)}</li>" for note in report["notes"])
    chart = pr_chart(report) or "<p>no class has labels and detections: no curve</p>"
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>evaluation: {escape(report['pipeline'])}</title>"
        "<style>body{font-family:sans-serif;max-width:60em;margin:2em auto}td,th{padding:2px 8px;text-align:left}</style></head><body>"
        f"<h1>{escape(report['pipeline'])}: accuracy on labels</h1>"
        f"<p>{report['labels']['images_scored']} images, {report['labels']['labels']} labels from {escape(report['labels']['path'])} "
        f"({report['labels']['format']}); {escape(report['evaluator'])}; {escape(report['backend'])} on {escape(report['target'])}. "
        f"Verdict: <b>{escape(report['verdict_detail'])}</b></p><ul>{checks}{notes}</ul>"
        f"<h2>Figures</h2><table>{figures}</table><h2>Precision-recall</h2>{chart}"
        "<h2>Per class</h2><table><tr><th>class</th><th>category id</th><th>labels</th><th>detections</th><th>AP</th><th>AP50</th></tr>"
        f"{rows}</table></body></html>\n"
    )


def write(report: dict, folder: Path) -> Path:
    """report.json, junit.xml and report.html in `folder`, each published whole."""
    folder = Path(folder)
    write_report(report, folder)
    write_junit(report, folder)
    write_whole(folder / HTML_FILE, html(report))
    return folder


def write_json(report: dict, path: Path) -> Path:
    write_whole(Path(path), json.dumps(report, indent=2) + "\n")
    return Path(path)


__all__ = ["HTML_FILE", "html", "pr_chart", "summary", "write", "write_json"]
