"""What `sdk evaluate` writes: report.json (everything), junit.xml (one case per budget, as every run's), report.html
(the figures, the operating point and its bins, the per-class table, the precision-recall curves as SVG, the worst
images), `pr/` (each class's precision-recall curve as its own SVG), `worst/` (the worst images drawn, JPEG), and the
short summary for stdout."""

from __future__ import annotations

import json
from html import escape
from pathlib import Path

import numpy as np

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
    lines += operating_lines(report)
    for shard in report.get("targets", []):  # sdk evaluate --target T|GROUP: which target ran which images
        ran = f"{shard['images']} image(s), {shard['first']} to {shard['last']}"
        lines.append(f"target {shard['target']}: " + (f"failed ({shard['error']}); not run: {ran}" if "error" in shard else f"ran {ran}"))
    scored = sorted((c for c in report["per_class"] if c["ap50_95"] is not None), key=lambda c: c["ap50_95"])
    if scored:
        lines.append(f"classes scored: {len(scored)}; lowest AP: " + ", ".join(f"{c['name']} {c['ap50_95']:.3f}" for c in scored[:3]))
    for check in report["checks"]:
        lines.append(f"{check['name']}: {check['status']} (minimum {check['limit']:g}, measured {_figure(check['measured'])}; {check['detail']})")
    lines.extend(f"note: {note}" for note in report["notes"])
    lines.append(f"verdict: {report['verdict_detail']}")
    return lines


def _bounds(interval) -> str:
    return f" ({interval[0]:.3f} to {interval[1]:.3f})" if interval else ""


def operating_lines(report: dict) -> list[str]:
    """The operating point in two lines: recall and false positives per image; the classes lowest at the precision."""
    point = report.get("operating_point")
    if not point:
        return []
    lines = [
        f"at score {point['score']:g} (IoU 0.5): recall {_figure(point['recall'])}{_bounds(point['recall_interval'])}, "
        f"false positives per image {_figure(point['fp_per_image'])}{_bounds(point['fp_per_image_interval'])}"
    ]
    rated = [c["recall_at_precision"] for c in report["per_class"] if c.get("recall_at_precision") is not None]
    if rated:
        never = sum(1 for value in rated if value == 0)
        lines.append(
            f"recall at precision {point['precision']:g}, per class: median {float(np.median(rated)):.3f}; "
            f"{never} of {len(rated)} classes never reach that precision"
        )
    return lines


def class_chart(report: dict, entry: dict) -> str | None:
    """One class's precision-recall curve at IoU 0.5 with the precision target as a dashed line, as SVG."""
    precision = (report.get("curves") or {}).get("per_class50", {}).get(str(entry["category_id"]))
    if precision is None:
        return None
    point = report.get("operating_point") or {}
    chart = Chart(3.4, 2.6, legend=False)
    chart.axes(Axis([0.0, 1.0], False), Axis([0.0, 1.0], False))
    chart.line(report["curves"]["recall"], precision, CYCLE[0], width=1.4)
    if "precision" in point:
        chart.rule(point["precision"], "grey", f"precision {point['precision']:g}", vertical=False)
    reached = entry.get("recall_at_precision")
    chart.title = f"{entry['name']}: AP50 {_figure(entry['ap50'])}" + (f", R@P {reached:.2f}" if reached is not None else "")
    chart.xlabel, chart.ylabel = "recall", "precision"
    return chart.svg()


def _chart_file(entry: dict) -> str:
    safe = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in entry["name"])
    return f"pr/{entry['category_id']}-{safe}.svg"


def operating_html(report: dict) -> str:
    point = report.get("operating_point")
    if not point:
        return ""
    bins = "".join(
        f"<tr><td>{escape(b['attribute'])}</td><td>{escape(b['bin'])}</td><td>{b['labels']}</td>"
        f"<td>{_figure(b['recall'])}{escape(_bounds(b['interval']))}</td></tr>"
        for b in point["bins"]
    )
    return (
        f"<h2>At the operating score</h2><p>Detections scoring at least {point['score']:g}, matched at IoU 0.5 by COCOeval: recall "
        f"{_figure(point['recall'])}{escape(_bounds(point['recall_interval']))}, false positives per image "
        f"{_figure(point['fp_per_image'])}{escape(_bounds(point['fp_per_image_interval']))} (95% intervals over images). "
        f"Per class: the recall reached at precision {point['precision']:g} (R@P) and the score it takes.</p>"
        "<table><tr><th>labels by</th><th>bin</th><th>labels</th><th>recall</th></tr>"
        f"{bins}</table>"
    )


def worst_html(report: dict) -> str:
    entries = [w for w in report.get("worst_images", []) if w.get("drawing")]
    if not entries:
        return ""
    point = report["operating_point"]
    items = "".join(
        f"<figure><img src='{escape(w['drawing'])}' style='max-width:100%'><figcaption>{escape(w['image'])}: {w['missed']} missed, "
        f"{w['false_positives']} false positives</figcaption></figure>"
        for w in entries
    )
    return (
        f"<h2>The worst images</h2><p>Most labels missed plus false positives at score {point['score']:g} (IoU 0.5). Green: labels "
        "found; orange: labels missed; blue: detections on a label; red: false positives; grey: ignore regions.</p>"
        f"{items}"
    )


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
        f"<td>{_figure(c['ap50_95'])}</td><td>{_figure(c['ap50'])}</td><td>{_figure(c.get('recall_at_precision'))}</td>"
        f"<td>{_figure(c.get('score_at_precision'))}</td><td>{_figure(c.get('recall'))}</td><td>{_figure(c.get('fp_per_image'))}</td></tr>"
        for c in report["per_class"]
    )
    per_class50 = (report.get("curves") or {}).get("per_class50", {})
    charts = "".join(
        f"<img src='{escape(_chart_file(c))}' alt='{escape(c['name'])}'>" for c in report["per_class"] if str(c["category_id"]) in per_class50
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
        f"<h2>Figures</h2><table>{figures}</table><h2>Precision-recall</h2>{chart}{operating_html(report)}"
        "<h2>Per class</h2><table><tr><th>class</th><th>category id</th><th>labels</th><th>detections</th><th>AP</th><th>AP50</th>"
        "<th>R@P</th><th>score at P</th><th>recall</th><th>FP/image</th></tr>"
        f"{rows}</table><h2>Precision-recall per class (IoU 0.5)</h2><div>{charts}</div>{worst_html(report)}</body></html>\n"
    )


def write(report: dict, folder: Path) -> Path:
    """The worst images drawn and each class's curve, then report.json, junit.xml and report.html in `folder`, each
    published whole. A worst image that no longer decodes loses its drawing, and a note says so."""
    from tools.evaluate.drawing import write_drawings

    folder = Path(folder)
    missing = write_drawings(report.get("worst_images", []), folder)
    for entry in report.get("worst_images", []):
        if entry["image"] in missing:
            entry["drawing"] = None
    if missing:
        report["notes"].append(f"{len(missing)} of the worst images no longer decode and are not drawn: {', '.join(missing)}")
    for entry in report["per_class"]:
        chart = class_chart(report, entry)
        if chart is not None:
            (folder / "pr").mkdir(parents=True, exist_ok=True)
            write_whole(folder / _chart_file(entry), chart)
    write_report(report, folder)
    write_junit(report, folder)
    write_whole(folder / HTML_FILE, html(report))
    return folder


def write_json(report: dict, path: Path) -> Path:
    write_whole(Path(path), json.dumps(report, indent=2) + "\n")
    return Path(path)


__all__ = ["HTML_FILE", "class_chart", "html", "operating_lines", "pr_chart", "summary", "write", "write_json"]
