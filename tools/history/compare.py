"""`sdk compare A B`: per-stage and end-to-end latency, deadline misses and accuracy of B against A, figure by figure
(and mAP on labels where both were scored on the same labelled images: tools/history/compare_labels.py).

Each side is one run or several (a release measured more than once: pooled, two-level bootstrap, tools/history/stats.py).
Each figure gets the difference B - A, an interval simultaneous over the comparison's figures at the chosen confidence,
and a verdict: `worse` or `better` when the whole interval lies beyond the minimum difference (a share of A's value),
`same` otherwise: no difference that these runs can show. Where the history knows how runs of one release differ by
themselves on this device class (tools/history/noise.py), no interval is narrower than that spread allows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from tools.history.compare_labels import label_pairs
from tools.history.noise import Spread
from tools.history.samples import SERIES, RunSamples, accuracy_figures
from tools.history.stats import DRAWS, SEED, Difference, Replicates, judge, mean_replicates, pool, quantile_replicates, sum_replicates, verdict_of

DEFAULT_CONFIDENCE = 0.95
DEFAULT_MIN_DIFFERENCE = 0.0
QUANTILES = (("p50_ms", 0.5), ("p99_ms", 0.99))
ACCURACY_HIGHER_IS_BETTER = {"recall": True, "precision": True, "mean_iou": True, "mean_score_drift": False}
VERDICTS = ("better", "worse", "same")
MAX_LOG_HALF = 700.0  # exp() of more overflows a float (about 1e304)
TOO_WIDE = math.log(2)  # an interval that lets B be half or twice A tells nothing: "too few runs to tell" instead of numbers
MORE_RUNS = 5  # what a side needs to tell a run-to-run spread from a change (`sdk validate --repeat 5`)


@dataclass
class Side:
    """What one of A and B names (`spec`), the runs it resolved to, and what they have in common."""

    spec: str
    runs: list[RunSamples]
    entries: list[dict] = field(default_factory=list)  # the history's rows of those runs, where known
    notes: list[str] = field(default_factory=list)  # what resolving it had to assume

    @property
    def release(self) -> str | None:
        releases = {r.report.get("release") for r in self.runs}
        return releases.pop() if len(releases) == 1 else None

    def describe(self) -> dict:
        return {
            "spec": self.spec,
            "release": self.release,
            "runs": [
                {
                    "id": (self.entries[k].get("id") if k < len(self.entries) else None),
                    "report_dir": str(r.folder) if r.folder is not None else None,
                    "target": r.report.get("target"),
                    "release": r.report.get("release"),
                    "started_at": (r.report.get("run") or {}).get("started_at"),
                    "measured_frames": r.report.get("measured_frames"),
                    "per_frame": r.has_frames,
                }
                for k, r in enumerate(self.runs)
            ],
        }


def figure_name(series: str, key: str) -> str:
    return f"end_to_end.{key}" if series == "end_to_end" else f"stages.{series}.{key}"


def run_figures(run: RunSamples, deadline_ms: float | None, rng: np.random.Generator, draws: int) -> dict[str, Replicates]:
    """Every figure of one run with its replicates; from report.json alone (no replicates) where the frames are gone."""
    figures: dict[str, Replicates] = {}
    for series in SERIES:
        values = run.latencies.get(series)
        if values is not None:
            for (key, _), replicate in zip(QUANTILES, quantile_replicates(values, tuple(q for _, q in QUANTILES), rng, draws), strict=False):
                figures[figure_name(series, key)] = replicate
        else:
            summary = run.report.get(series) if series == "end_to_end" else (run.report.get("stages") or {}).get(series)
            for key, _ in QUANTILES:
                value = (summary or {}).get(key)
                figures[figure_name(series, key)] = Replicates(value, None)
    if deadline_ms is not None:
        flags = run.miss_flags(deadline_ms)
        if flags is not None:
            figures["deadline.miss_ratio"] = mean_replicates(flags, rng, draws)
        else:
            figures["deadline.miss_ratio"] = Replicates((run.report.get("deadline") or {}).get("miss_ratio"), None)
    if run.accuracy is not None:
        totals, replicates, blocks = sum_replicates(run.accuracy, rng, draws)
        points = accuracy_figures(totals)
        spread = accuracy_figures(replicates.T) if replicates is not None else None
        for name, value in points.items():
            figures[f"accuracy.{name}"] = Replicates(float(value), None if spread is None else np.asarray(spread[name], np.float64), blocks)
    elif run.report.get("accuracy"):
        for name in ACCURACY_HIGHER_IS_BETTER:
            figures[f"accuracy.{name}"] = Replicates(run.report["accuracy"].get(name), None)
    return figures


def deadline_of(a: Side, b: Side) -> float | None:
    """The deadline both sides' misses are counted against: A's (the baseline), else B's."""
    for side in (a, b):
        for run in side.runs:
            deadline = (run.report.get("deadline") or {}).get("deadline_ms")
            if deadline is not None:
                return float(deadline)
    return None


def side_figures(side: Side, deadline_ms: float | None, rng: np.random.Generator, draws: int) -> dict[str, Replicates]:
    each = [run_figures(run, deadline_ms, rng, draws) for run in side.runs]
    names = [name for name in each[0] if all(name in f for f in each)] if each else []
    return {name: pool([f[name] for f in each], rng, draws) for name in names}


def compare(
    a: Side,
    b: Side,
    *,
    confidence: float = DEFAULT_CONFIDENCE,
    min_difference: float = DEFAULT_MIN_DIFFERENCE,
    spreads: dict[str, Spread] | None = None,
    draws: int = DRAWS,
    seed: int = SEED,
) -> dict:
    """The comparison as `sdk compare --json` prints it: `figures` (name, a, b, difference, interval, verdict, ...)."""
    rng = np.random.default_rng(seed)
    deadline = deadline_of(a, b)
    figures_a, figures_b = side_figures(a, deadline, rng, draws), side_figures(b, deadline, rng, draws)
    names = [name for name in figures_a if name in figures_b]
    tested = [n for n in names if figures_a[n].draws is not None and figures_b[n].draws is not None]
    labelled = label_pairs(a, b, draws, seed)  # mAP on labels: a paired bootstrap over the same images
    alpha = (1 - confidence) / max(1, len(tested) + labelled.tested)  # Bonferroni: simultaneous over the figures tested
    spreads = spreads or {}
    rows = []
    for name in names:
        lower_is_better = ACCURACY_HIGHER_IS_BETTER.get(name.removeprefix("accuracy."), False) is False
        base = figures_a[name].value
        margin = min_difference * abs(base) if base is not None and not name.startswith("accuracy.") else 0.0
        result = judge(name, figures_a[name], figures_b[name], lower_is_better=lower_is_better, alpha=alpha, margin=margin)
        spread = spreads.get(name)
        if spread is not None and result.interval is not None and base and result.b:
            log_half = spread.log_half_width(alpha, len(a.runs), len(b.runs))
            widened = widen(result, log_half)
            if log_half > TOO_WIDE and widened.verdict == "same":  # an interval this wide tells nothing: no unbounded numbers
                result = Difference(result.name, result.a, result.b, result.difference, None, "same", result.lower_is_better, result.margin)
                rows.append({**as_row(result, spread, name in tested), "too_few_runs": True})
                continue
            result = widened  # a change beyond even that spread is still said (a 10x slowdown)
        rows.append(as_row(result, spread, name in tested))
    rows += [as_row(result, None, paired) for result, paired in labelled.differences(alpha)]
    return {
        "a": a.describe(),
        "b": b.describe(),
        "confidence": confidence,
        "min_difference": min_difference,
        "figures_tested": len(tested) + labelled.tested,
        "method": (
            f"circular block bootstrap over frames ({draws} draws; several runs of a side: runs, then frames; mAP on labels: "
            f"paired over images), intervals simultaneous over {len(tested) + labelled.tested} figures (Bonferroni) at {confidence:g}"
        ),
        "deadline_ms": deadline,
        "figures": rows,
        "summary": {verdict: [r["name"] for r in rows if r["verdict"] == verdict] for verdict in ("worse", "better")},
        "too_few_runs": [r["name"] for r in rows if r.get("too_few_runs")],
        "different": different(a, b),
        "notes": notes(a, b, names, tested, spreads) + labelled.notes + too_few_note(a, b, rows),
    }


def different(a: Side, b: Side) -> list[str]:
    """What A and B do not share (pipeline name, pipeline file, model): figures of different work, said loudly."""
    found = []
    for key, what in (("pipeline", "pipeline"), ("pipeline_sha256", "pipeline file"), ("model_sha256", "model")):
        values = []
        for side in (a, b):
            seen = {(r.report.get(key) if key == "pipeline" else (r.report.get("hashes") or {}).get(key)) for r in side.runs}
            values.append(seen)
        if all(values) and None not in values[0] | values[1] and values[0].isdisjoint(values[1]):
            short = [", ".join(sorted(str(v)[:12] for v in side)) for side in values]
            found.append(f"{what}: A {short[0]}, B {short[1]}")
    return found


def too_few_note(a: Side, b: Side, rows: list[dict]) -> list[str]:
    few = [r["name"] for r in rows if r.get("too_few_runs")]
    if not few:
        return []
    return [
        f"too few runs to tell ({len(a.runs)} run(s) of A, {len(b.runs)} of B) for {len(few)} figure(s): how whole runs differ on this "
        f"device class would allow anything from half to twice A; measure each side again, e.g. `sdk validate PIPELINE --target T "
        f"--repeat {MORE_RUNS}` (every repeat is a run of its own in the history)"
    ]


def widen(result: Difference, log_half: float) -> Difference:
    """No narrower than the run-to-run spread allows: B / A anywhere in B / A times exp(+-log_half)."""
    low, high = result.interval
    stretch = math.exp(log_half) if log_half < MAX_LOG_HALF else math.inf  # few runs, many figures: unbounded, not an overflow
    low, high = min(low, result.b / stretch - result.a), max(high, result.b * stretch - result.a)
    verdict = verdict_of(low, high, result.margin, result.lower_is_better)
    return Difference(result.name, result.a, result.b, result.difference, (low, high), verdict, result.lower_is_better, result.margin)


def as_row(result: Difference, spread: Spread | None, tested: bool) -> dict:
    relative = result.difference / result.a if result.difference is not None and result.a else None
    return {
        "name": result.name,
        "a": _round(result.a),
        "b": _round(result.b),
        "difference": _round(result.difference),
        "interval": [_round(v) for v in result.interval] if result.interval is not None else None,
        "verdict": result.verdict,
        "relative": _round(relative),
        "unit": "ms" if result.name.endswith("_ms") else "ratio",
        "lower_is_better": result.lower_is_better,
        "margin": _round(result.margin),
        "tested": tested,
        "run_to_run": None if spread is None else {"log_sd": round(spread.sd, 5), "runs": spread.runs, "degrees": spread.degrees},
    }


def notes(a: Side, b: Side, names: list[str], tested: list[str], spreads: dict) -> list[str]:
    out = []
    untested = [n for n in names if n not in tested]
    if untested:
        out.append(
            f"{len(untested)} figure(s) without per-frame samples on both sides (timeline.npz or the accuracy files missing): "
            f"shown, not tested, verdict `same`: {', '.join(untested)}"
        )
    if not spreads:
        out.append(
            "the history holds no two runs of one release on this device class: the intervals rest on the frames alone, "
            "and cannot include what moves whole runs (clocks, other work, heat)"
        )
    out += a.notes + b.notes
    if a.release is not None and a.release == b.release:
        out.append(f"both sides ran release {a.release}: any `worse` or `better` is the machine's, not the release's")
    return out


def _round(value):
    if value is None or not isinstance(value, (int, float)) or math.isnan(value):
        return None
    return round(float(value), 6)


__all__ = ["VERDICTS", "Side", "compare", "different"]
