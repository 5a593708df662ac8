"""report.json and report.html of `sdk optimize`: the candidates, the accuracy-latency front, what changed."""

from __future__ import annotations

import html
import json
from pathlib import Path

from tools.output_paths import write_output

COLOURS = {"magnitude": "#c0392b", "reconstruct": "#2471a3", "reconstruct+fskd": "#1e8449", "reconstruct+fskd+2:4": "#7d3c98",
           "reconstruct+2:4": "#7d3c98"}  # fmt: skip


def write_json(report: dict, path: Path) -> None:
    write_output(path, json.dumps(report, indent=1, sort_keys=True) + "\n", "the report folder")


def front_svg(report: dict, width: int = 640, height: int = 360) -> str:
    """Quality (the lower of recall and precision) against speed-up on this CPU, one dot per candidate, the front joined."""
    points = [c for c in report.get("candidates", []) if c.get("measured") and c.get("accuracy")]
    if not points:
        return "<p>No candidate was measured.</p>"
    xs = [c["measured"]["speedup"] for c in points] + [1.0]
    ys = [min(c["accuracy"]["recall"], c["accuracy"]["precision"]) for c in points] + [1.0]
    gate = report.get("gate") or {}
    floor = min(gate.get("min_recall", 1.0), gate.get("min_precision", 1.0))
    x0, x1 = min(xs) * 0.97, max(xs) * 1.03
    y0, y1 = max(0.0, min(ys + [floor]) - 0.05), 1.01
    left, right, top, bottom = 60, 20, 20, 45

    def x(v: float) -> float:
        return left + (v - x0) / max(x1 - x0, 1e-9) * (width - left - right)

    def y(v: float) -> float:
        return top + (y1 - v) / max(y1 - y0, 1e-9) * (height - top - bottom)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="11">',
             f'<rect x="{left}" y="{top}" width="{width - left - right}" height="{height - top - bottom}" fill="none" stroke="#999"/>',
             f'<line x1="{left}" x2="{width - right}" y1="{y(floor):.1f}" y2="{y(floor):.1f}" stroke="#e67e22" stroke-dasharray="4 3"/>',
             f'<text x="{width - right - 4}" y="{y(floor) - 4:.1f}" text-anchor="end" fill="#e67e22">gate {floor}</text>',
             f'<line x1="{x(1.0):.1f}" x2="{x(1.0):.1f}" y1="{top}" y2="{height - bottom}" stroke="#999" stroke-dasharray="2 3"/>',
             f'<text x="{(left + width - right) / 2}" y="{height - 10}" text-anchor="middle">speed-up on this CPU (ONNX Runtime, same run)</text>',
             f'<text x="14" y="{(top + height - bottom) / 2}" text-anchor="middle" transform="rotate(-90 14 {(top + height - bottom) / 2})">'
             "min(recall, precision) vs FP32</text>"]  # fmt: skip
    for value in (x0, (x0 + x1) / 2, x1):
        parts.append(f'<text x="{x(value):.1f}" y="{height - bottom + 14}" text-anchor="middle">{value:.2f}x</text>')
    for value in (y0, (y0 + y1) / 2, y1):
        parts.append(f'<text x="{left - 4}" y="{y(value) + 4:.1f}" text-anchor="end">{value:.2f}</text>')
    front = sorted((c for c in points if c.get("on_front")), key=lambda c: c["measured"]["speedup"])
    if len(front) > 1:
        path = " ".join(f"{x(c['measured']['speedup']):.1f},{y(min(c['accuracy']['recall'], c['accuracy']['precision'])):.1f}" for c in front)
        parts.append(f'<polyline points="{path}" fill="none" stroke="#555" stroke-width="1"/>')
    for c in points:
        cx, cy = x(c["measured"]["speedup"]), y(min(c["accuracy"]["recall"], c["accuracy"]["precision"]))
        colour = COLOURS.get(c["method"], "#333")
        ring = ' stroke="#000" stroke-width="2"' if c["name"] == report.get("chosen") else ""
        parts.append(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="5" fill="{colour}"{ring}><title>{html.escape(c["name"])}</title></circle>')
    parts.append(f'<circle cx="{x(1.0):.1f}" cy="{y(1.0):.1f}" r="5" fill="#000"><title>original</title></circle>')
    legend = [(m, COLOURS[m]) for m in ("magnitude", "reconstruct", "reconstruct+fskd") if any(c["method"] == m for c in points)]
    for number, (name, colour) in enumerate(legend):
        parts.append(f'<circle cx="{left + 12}" cy="{top + 12 + 14 * number}" r="4" fill="{colour}"/>'
                     f'<text x="{left + 20}" y="{top + 16 + 14 * number}">{name}</text>')  # fmt: skip
    parts.append("</svg>")
    return "\n".join(parts)


def write_html(report: dict, folder: Path) -> Path:
    rows = []
    for c in report.get("candidates", []):
        measured, accuracy = c.get("measured") or {}, c.get("accuracy") or {}
        rows.append(
            "<tr>"
            + "".join(
                f"<td>{html.escape(str(v))}</td>"
                for v in (
                    c["name"] + (" (chosen)" if c["name"] == report.get("chosen") else ""),
                    c["method"],
                    f"{measured.get('median_ms', '-')}",
                    f"{measured.get('speedup', '-')}",
                    f"{c.get('predicted_ms')}",
                    accuracy.get("recall"),
                    accuracy.get("precision"),
                    accuracy.get("mean_iou"),
                    accuracy.get("mean_score_drift"),
                    "PASS" if c.get("passed") else "; ".join(accuracy.get("failures", [])) or "-",
                    "yes" if c.get("on_front") else "",
                )
            )
            + "</tr>"  # fmt: skip
        )
    original = report.get("original", {})
    blocked = "".join(
        f"<li>{html.escape(b['layer'])} ({b['channels']}): {html.escape('; '.join(b['why'][:2]))}</li>" for b in report.get("blocked", [])
    )
    outputs = report.get("outputs") or {}
    changed = ""
    if outputs:
        counts = outputs["changes"]["channels"]
        changed = (
            "<h2>What changed</h2><table><tr><th>layer</th><th>channels</th><th>kept</th></tr>"
            + "".join(f"<tr><td>{html.escape(k)}</td><td>{v[0]}</td><td>{v[1]}</td></tr>" for k, v in counts.items())
            + "</table>"
        )
        changed += f"<p>Written: {html.escape(outputs['model'])} and {html.escape(outputs['pipeline'])}</p>"
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in report.get("notes", []))
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>sdk optimize: {html.escape(str(report.get("pipeline")))}</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:3px 6px;font-size:13px}}</style>
</head><body><h1>sdk optimize: {html.escape(str(report.get("pipeline")))} for {html.escape(str(report.get("target")))}: {report.get("verdict")}</h1>
<p>Original: {original.get("measured", {}).get("median_ms", "-")} ms measured on this CPU, {original.get("predicted_ms")} ms predicted on
{html.escape(str(report.get("platform")))}. Chosen: {html.escape(str(report.get("chosen")))}; magnitude baseline at the same channel counts:
{html.escape(str(report.get("baseline")))}.</p><ul>{notes}</ul>
<h2>The accuracy-latency front</h2>{front_svg(report)}
<h2>Candidates</h2><table><tr><th>candidate</th><th>method</th><th>ms (CPU)</th><th>speed-up</th><th>predicted ms</th><th>recall</th>
<th>precision</th><th>mean IoU</th><th>score drift</th><th>gate</th><th>front</th></tr>{"".join(rows)}</table>
{changed}<h2>Never pruned</h2><ul>{blocked}</ul></body></html>
"""
    path = folder / "report.html"
    write_output(path, page, "the report folder")
    return path
