"""The performance page's plots, drawn with the report's SVG writer from data files kept in the repository.

    python -m tools.docs.performance_plots            # rewrite docs/img/perf-*.svg from docs/data and the published table
    python -m tools.docs.performance_plots --check    # exit 1 and name the stale plots (what tests/test_docs.py checks)

- perf-published.svg: predicted against published latency, log-log, with y = x and the ±25 % band, from
  tools/perf/data/published.yaml (each row's source) and docs/data/published_predictions.json (what
  `python tests/benchmarks/bench_published.py --out docs/data/published_predictions.json` writes).
- perf-optimize-front.svg: speed-up against recall of `sdk optimize`'s candidates on the example, from
  docs/data/optimize_front.json (the figures of the guide's table and the command that measured them).

No latency distribution is drawn: no deploy's frames are kept in the repository (the page's latency rows are
percentiles of runs whose timeline.npz stayed in their report folders).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from sdk.errors import ConfigError, SdkError
from tools.docs.header import REPO
from tools.reports.svg_chart import CYCLE, Axis, Chart

DATA = REPO / "docs" / "data"
IMG = REPO / "docs" / "img"
REGENERATE = "python -m tools.docs.performance_plots"
BAND = 0.25  # the page's "within ±25 %"
SOURCE_NAMES = {"mlperf-v3.1": "MLPerf", "dla-sw": "DLA-SW", "ultralytics-agx": "Ultralytics", "ultralytics-nano-nx": "Ultralytics"}


def _load(path: Path):
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file", hint=f"it is the data {REGENERATE} draws; restore it from git") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not JSON ({exc.msg}, line {exc.lineno})", hint="restore it from git or rewrite it") from None


def _records(path: Path, items, numbers: tuple[str, ...], choices: dict[str, tuple]) -> list[dict]:
    """Each row a mapping with these positive numbers and these keys among their choices, else one ConfigError."""
    allowed = f"every row has {', '.join(numbers)} (numbers > 0) and " + "; ".join(f"{k}: {' or '.join(map(str, c))}" for k, c in choices.items())
    if not isinstance(items, list) or not items:
        raise ConfigError(f"{path}: no rows (found {type(items).__name__})", hint=allowed)
    for number, item in enumerate(items, 1):
        item = item if isinstance(item, dict) else {}
        for key in numbers:
            value = item.get(key)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 or value == float("inf"):
                raise ConfigError(f"{path}: row {number}: {key} is {value!r}", hint=allowed)
        for key, choice in choices.items():
            if item.get(key) not in choice:
                raise ConfigError(f"{path}: row {number}: {key} is {item.get(key)!r}", hint=allowed)
    return items


def published_svg(data: Path = DATA) -> str:
    """Predicted against published ms per row: held-out rows by source, the fitted rows apart; y = x and ±25 %."""
    from tools.perf.published import published_table

    _, rows = published_table()
    source_of = {r.id: r.source for r in rows}
    path = data / "published_predictions.json"
    results = _records(path, _load(path), ("published_ms", "predicted_ms"), {"split": ("fit", "held_out")})
    series: dict[str, list[tuple[float, float]]] = {}
    for r in results:
        name = "fitted on" if r["split"] == "fit" else SOURCE_NAMES.get(source_of.get(r["id"], ""), "other")
        series.setdefault(name, []).append((r["published_ms"], r["predicted_ms"]))
    values = [v for points in series.values() for p in points for v in p]
    low, high = min(values) / 1.3, max(values) * 1.3
    chart = Chart(6.0, 5.0)
    chart.axes(Axis([low, high], True, pad=0.0), Axis([low, high], True, pad=0.0))
    diagonal = np.array([low, high])
    chart.line(diagonal, diagonal, "black", "predicted = published", width=0.8)
    upper, lower = np.array([low, high / (1 + BAND)]), np.array([low / (1 - BAND), high])  # the band inside the axes
    chart.line(upper, upper * (1 + BAND), "grey", "±25 %", dashed=True)
    chart.line(lower, lower * (1 - BAND), "grey", None, dashed=True)
    for number, name in enumerate(sorted(series, key=lambda n: (n.startswith("fitted"), n))):
        xs, ys = zip(*series[name], strict=True)
        within = sum(abs(y / x - 1) <= BAND for x, y in series[name])
        colour = "grey" if name.startswith("fitted") else CYCLE[number % len(CYCLE)]
        chart.points(list(xs), list(ys), colour, f"{name} ({within}/{len(xs)} in ±25 %)")
    chart.title = f"sdk predict against {len(results)} published Jetson figures"
    chart.xlabel, chart.ylabel = "published ms (log scale)", "predicted ms (log scale)"
    return chart.svg()


def front_svg(data: Path = DATA) -> str:
    """Each candidate's recall at its speed-up (the bar: the range over rounds); the target's speed-up and recall."""
    path = data / "optimize_front.json"
    front = _load(path)
    front = front if isinstance(front, dict) else {}
    candidates = _records(path, front.get("candidates"), ("speedup", "low", "high"), {"gate": ("pass", "fail")})
    if not all(type(c.get("recall")) in (int, float) and 0 <= c["recall"] <= 1 for c in candidates):
        raise ConfigError(f"{path}: a candidate's recall is not between 0 and 1", hint="recall: a share from 0 to 1")
    (target,) = _records(path, [front.get("target")], ("speedup", "recall"), {})
    chart = Chart(6.0, 4.2)
    speeds = [v for c in candidates for v in (c["low"], c["high"])] + [1.0, target["speedup"]]
    chart.axes(Axis(speeds, False), Axis([0.0, 1.0], False))
    for c in candidates:
        chart.line([c["low"], c["high"]], [c["recall"], c["recall"]], "tab:green" if c["gate"] == "pass" else "tab:red", None, width=0.8)
    for gate, colour, label in (("pass", "tab:green", "passes the gate"), ("fail", "tab:red", "fails the gate")):
        chosen = [c for c in candidates if c["gate"] == gate]
        if chosen:
            chart.points([c["speedup"] for c in chosen], [c["recall"] for c in chosen], colour, f"{label} ({len(chosen)})")
    for c in candidates:
        if c.get("chosen"):
            chart.points([c["speedup"]], [c["recall"]], "black", "chosen")
    chart.rule(target["recall"], "tab:blue", f"goal: recall {target['recall']}", vertical=False)
    chart.rule(target["speedup"], "tab:orange", f"goal: {target['speedup']}x", vertical=True)
    chart.title = "sdk optimize on the example: speed-up against recall"
    chart.xlabel, chart.ylabel = "speed-up on the CPU (median; bar: range over rounds)", "recall against the FP32 model"
    return chart.svg()


PLOTS = {"perf-published.svg": published_svg, "perf-optimize-front.svg": front_svg}


def stale(img: Path = IMG, data: Path = DATA) -> list[str]:
    """The plots whose committed SVG differs from what the data draws now."""
    return [name for name, draw in PLOTS.items() if not (img / name).is_file() or (img / name).read_text() != draw(data) + "\n"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=REGENERATE, description="draw the performance page's plots into docs/img")
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 when a plot is stale")
    args = parser.parse_args(argv)
    try:
        if args.check:
            found = stale()
            for name in found:
                print(f"{IMG / name} is stale (its data changed, or it was edited by hand)")
            if found:
                print(f"regenerate with: {REGENERATE}")
            return 1 if found else 0
        IMG.mkdir(parents=True, exist_ok=True)
        for name, draw in PLOTS.items():
            (IMG / name).write_text(draw(DATA) + "\n")
            print(IMG / name)
    except SdkError as exc:
        print(f"error: {exc}", file=sys.stderr)
        print(f"hint: {exc.hint}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
