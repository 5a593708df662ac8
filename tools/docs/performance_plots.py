"""The performance page's plots, drawn with the report's SVG writer from data files kept in the repository.

    python -m tools.docs.performance_plots            # rewrite docs/img/perf-*.svg from docs/data and the published table
    python -m tools.docs.performance_plots --check    # exit 1 and name the stale plots (what tests/test_docs.py checks)

- perf-published.svg: predicted against published latency, log-log, with y = x and the ±25 % band, from
  tools/perf/data/published.yaml (each row's source) and docs/data/published_predictions.json (what
  `python tests/benchmarks/bench_published.py --out docs/data/published_predictions.json` writes).
- perf-optimize-front.svg: speed-up against recall of `sdk optimize`'s candidates on the example, from
  docs/data/optimize_front.json (the figures of the guide's table and the command that measured them).

- perf-latency.svg: a deploy's latency per stage (the example's on the page), a CDF of every measured frame, with its budgets, from
  docs/data/latency_example.json: what `python -m tools.docs.performance_plots --latency-from REPORT_DIR` keeps of a
  deploy's report folder (its timeline.npz, each frame's stage times; the command, machine and notes of report.json).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from sdk.errors import ConfigError, SdkError
from sdk.runtime.verdict import format_number
from tools.docs.header import REPO
from tools.reports.plots import BUDGET_COLOURS, budget_lines, latencies_from_timeline
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


LATENCY = "latency_example.json"
STAGES = ("preprocess", "infer", "postprocess", "sink", "queue", "end_to_end")


def latency_svg(data: Path = DATA) -> str:
    """Each stage's latency as a CDF over the run's measured frames (log ms), with the end-to-end budgets and deadline."""
    path = data / LATENCY
    run = _load(path)
    run = run if isinstance(run, dict) else {}
    allowed = f"stages_ms: a list of milliseconds (numbers >= 0) for each of {', '.join(STAGES)}, all of one length"
    stages = run.get("stages_ms") if isinstance(run.get("stages_ms"), dict) else {}
    for stage in STAGES:
        values = stages.get(stage)
        good = isinstance(values, list) and values and all(type(v) in (int, float) and 0 <= v < float("inf") for v in values)
        if not good or len(values) != len(stages[STAGES[0]]):
            raise ConfigError(f"{path}: stages_ms.{stage} is not {len(stages.get(STAGES[0]) or [])} milliseconds", hint=allowed)
    budgets = {k: v for k, v in (run.get("budgets_ms") or {}).items() if k in BUDGET_COLOURS and type(v) in (int, float) and v > 0}
    deadline = run.get("deadline_ms") if type(run.get("deadline_ms")) in (int, float) else None
    series = {stage: np.sort(np.asarray(stages[stage], np.float64)) for stage in STAGES}
    series = {stage: values[values > 0] for stage, values in series.items()}  # a zero has no place on a log axis
    shown = [float(v) for values in series.values() if len(values) for v in (values[0], values[-1])]
    chart = Chart(6.0, 4.4)
    chart.axes(Axis(shown + list(budgets.values()) + ([deadline] if deadline else []), True), Axis([0.0, 1.0], False))
    for number, (stage, values) in enumerate(series.items()):
        if len(values):
            fraction = np.arange(1, len(values) + 1) / len(values)
            label = f"{stage.replace('_', ' ')} (p99 {format_number(float(np.percentile(values, 99)))})"
            chart.line(values, fraction, CYCLE[number % len(CYCLE)], label, width=1.6 if stage == "end_to_end" else 1.0)
    budget_lines(chart, budgets, deadline, vertical=True)
    chart.title = f"{run.get('pipeline', 'the pipeline')}, {len(stages[STAGES[0]])} frames: latency per stage (p99 in ms)"
    chart.xlabel, chart.ylabel = "ms (log scale)", "fraction of frames"
    return chart.svg()


def _dump(kept: dict) -> str:
    """JSON with one line per field and per stage (a frame's numbers a line each would be thousands of lines)."""
    fields = [f" {json.dumps(key)}: {json.dumps(value)}" for key, value in kept.items() if key != "stages_ms"]
    stages = [f"  {json.dumps(stage)}: {json.dumps(values)}" for stage, values in kept["stages_ms"].items()]
    return "{\n" + ",\n".join([*fields, ' "stages_ms": {\n' + ",\n".join(stages) + "\n }"]) + "\n}\n"


def latency_data(folder: Path) -> dict:
    """What docs/data keeps of a deploy's report folder: each measured frame's stage times (ms, to the µs), the run's
    command, machine, verdict, budgets and its notes on the load."""
    from sdk.runtime.timeline import TIMELINE_FILE, read_timeline

    try:
        report = json.loads((folder / "report.json").read_text())
        timeline = read_timeline(folder / TIMELINE_FILE)
        measured = latencies_from_timeline(timeline)
        words = report["run"]["command"].split()
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"{folder}: not a deploy's report folder ({exc})", hint="give the --report-dir of a finished deploy or validate") from None
    if "--report-dir" in words:
        del words[words.index("--report-dir") : words.index("--report-dir") + 2]  # a path of this machine, not of the run
    environment = report.get("environment") or {}
    machine = f"{environment.get('cpus')} CPUs ({environment.get('machine')}), {environment.get('system')}"
    if report.get("target") == "local":  # the host is the device: its processor's name too
        cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else ""
        names = [line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if line.startswith("model name")]
        machine = f"{names[0]}, {machine}" if names else machine
    budgets = {c["name"].split(".", 1)[1]: c["limit"] for c in report["checks"] if c["name"].startswith("end_to_end.") and c["name"].endswith("_ms")}
    return {
        "pipeline": report.get("pipeline"),
        "command": " ".join(words),
        "date": report["run"]["started_at"][:10],
        "machine": machine,
        "backend": report.get("backend"),
        "verdict": report["verdict"],
        "notes": [note for note in report.get("notes", []) if "load" in note],
        "budgets_ms": budgets,
        "deadline_ms": (report.get("deadline") or {}).get("deadline_ms"),
        "stages_ms": {stage: [round(float(v), 3) for v in measured[stage]] for stage in STAGES},
    }


PLOTS = {"perf-published.svg": published_svg, "perf-optimize-front.svg": front_svg, "perf-latency.svg": latency_svg}


def stale(img: Path = IMG, data: Path = DATA) -> list[str]:
    """The plots whose committed SVG differs from what the data draws now."""
    return [name for name, draw in PLOTS.items() if not (img / name).is_file() or (img / name).read_text() != draw(data) + "\n"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=REGENERATE, description="draw the performance page's plots into docs/img")
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 when a plot is stale")
    parser.add_argument("--latency-from", type=Path, metavar="REPORT_DIR", help=f"first keep this deploy's frames as docs/data/{LATENCY}")
    args = parser.parse_args(argv)
    try:
        if args.latency_from:
            kept = latency_data(args.latency_from)
            partial = DATA / f".{LATENCY}.partial"  # the data file is replaced whole or not at all
            partial.write_text(_dump(kept))
            partial.replace(DATA / LATENCY)
            print(DATA / LATENCY)
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
