"""The acceptance verdict: every budget of the pipeline file checked against what the run measured.

A percentile budget PASSes only when the distribution-free 95 % upper bound of that percentile
is within it (see statistics.py); the measured percentile over the budget FAILs; anything
between is INCONCLUSIVE, with the frames that would be needed. The maximum is an observation,
never a worst-case bound, and the report says so. FAIL beats INCONCLUSIVE beats PASS; WARN (an
unmet environment requirement the pipeline only warns about) never changes the verdict, but it is
never a plain pass either: `describe_verdict` names it ("PASS, 2 unverified") and junit.py skips it.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from sdk.runtime.statistics import (
    CONFIDENCE,
    DeadlineMisses,
    drift_ms,
    frames_needed,
    proportion_upper_bound,
    quantile_estimate,
)
from sdk.spec.schema import Budgets

PASS, FAIL, INCONCLUSIVE, WARN = "PASS", "FAIL", "INCONCLUSIVE", "WARN"
QUANTILES = {"p50_ms": 0.50, "p99_ms": 0.99, "p999_ms": 0.999, "p9999_ms": 0.9999, "max_ms": 1.0}
Z_95 = 1.6449  # one-sided normal quantile, only for "about N frames" estimates

__all__ = [
    "PASS",
    "FAIL",
    "INCONCLUSIVE",
    "WARN",
    "QUANTILES",
    "BudgetCheck",
    "SHORT_UNITS",
    "check_unit",
    "combine",
    "counted",
    "on_labels",
    "describe_verdict",
    "evaluate",
    "format_number",
    "frames_needed",
    "summarize",
]


def summarize(values_ms: np.ndarray, keys: tuple[str, ...] = ("p50_ms", "p99_ms", "max_ms")) -> dict:
    """Measured percentiles (order statistics), the mean, and each percentile's 95 % bounds."""
    if len(values_ms) == 0:
        return {key: None for key in (*keys, "mean_ms")} | {"bounds": {}}
    out: dict = {}
    bounds: dict = {}
    for key in keys:
        estimate = quantile_estimate(values_ms, QUANTILES[key])
        out[key] = round(estimate.value, 4)
        if QUANTILES[key] < 1.0:
            bounds[key] = [_round(estimate.lower), _round(estimate.upper)]
    out["mean_ms"] = round(float(values_ms.mean()), 4)
    out["bounds"] = bounds
    return out


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


@dataclass(frozen=True)
class BudgetCheck:
    name: str
    limit: float | str | None
    measured: float | str | None
    status: str
    frames: int
    frames_needed: int | None
    detail: str = ""
    bound: float | None = None  # the confidence bound the status rests on, where there is one
    unverified: bool = False  # a requirement that could not be read here: its status is no measurement
    duration_s: float | None = None  # how long the measurement this check rests on took

    def as_dict(self) -> dict:
        return asdict(self)


def _percentile_check(name: str, key: str, values: np.ndarray, limit: float) -> BudgetCheck:
    q = QUANTILES[key]
    n = len(values)
    if n == 0:
        return BudgetCheck(name, limit, None, INCONCLUSIVE, 0, frames_needed(q), "no frames measured")
    estimate = quantile_estimate(values, q)
    measured = round(estimate.value, 4)
    if q >= 1.0:
        status = FAIL if measured > limit else PASS
        return BudgetCheck(name, limit, measured, status, n, 1, "observed maximum (a measurement, not a worst-case bound)")
    if measured > limit:
        return BudgetCheck(name, limit, measured, FAIL, n, frames_needed(q), "the measured percentile is over the budget", _round(estimate.upper))
    if estimate.upper is not None and estimate.upper <= limit:
        return BudgetCheck(
            name, limit, measured, PASS, n, frames_needed(q), f"95% upper bound {estimate.upper:.4g} ms is within", _round(estimate.upper)
        )
    if estimate.upper is None:
        return BudgetCheck(name, limit, measured, INCONCLUSIVE, n, frames_needed(q), "too few frames for a 95% upper bound")
    # Within budget, but the bound is not: more frames of the same distribution would settle it.
    within = float((values <= limit).mean())
    needed = math.ceil(Z_95**2 * q * (1 - q) / (within - q) ** 2) if within > q else None
    detail = f"measured within budget but the 95% upper bound {estimate.upper:.4g} ms is not"
    return BudgetCheck(name, limit, measured, INCONCLUSIVE, n, needed, detail, _round(estimate.upper))


def _miss_ratio_check(misses: DeadlineMisses, limit: float) -> BudgetCheck:
    ratio = round(misses.ratio, 6)
    upper = proportion_upper_bound(misses.misses, misses.frames)
    zero_miss_frames = frames_needed(1 - limit) if 0 < limit < 1 else 1
    if misses.frames == 0:
        return BudgetCheck("deadline.miss_ratio", limit, None, INCONCLUSIVE, 0, zero_miss_frames, "no frames measured")
    if ratio > limit:
        return BudgetCheck(
            "deadline.miss_ratio", limit, ratio, FAIL, misses.frames, None, f"{misses.misses} of {misses.frames} frames missed", round(upper, 6)
        )
    if upper <= limit:
        return BudgetCheck("deadline.miss_ratio", limit, ratio, PASS, misses.frames, None, f"95% upper bound {upper:.3g} is within", round(upper, 6))
    if misses.misses == 0:
        needed: int | None = zero_miss_frames
    elif limit > ratio:
        needed = math.ceil(Z_95**2 * ratio * (1 - ratio) / (limit - ratio) ** 2)
    else:
        needed = None
    detail = f"{misses.misses} of {misses.frames} frames missed; the 95% upper bound {upper:.3g} is over the limit"
    return BudgetCheck("deadline.miss_ratio", limit, ratio, INCONCLUSIVE, misses.frames, needed, detail, round(upper, 6))


def evaluate(
    budgets: Budgets,
    latencies_ms: dict[str, np.ndarray],
    dropped: int,
    misses: DeadlineMisses | None = None,
    environment_checks: list[BudgetCheck] = (),
) -> tuple[str, list[BudgetCheck], list[str]]:
    """(verdict, checks, notes) of the latency budgets, deadline, drops and environment requirements."""
    checks: list[BudgetCheck] = []
    groups = [("end_to_end", budgets.end_to_end)] + [(stage, limits) for stage, limits in budgets.stages.items()]
    groups += [(f"cascade.{step}", limits) for step, limits in budgets.cascade.items()]
    for group, limits in groups:
        if limits is None:
            continue
        for key, limit in limits.items():
            checks.append(_percentile_check(f"{group}.{key}", key, latencies_ms[group], limit))
    e2e = latencies_ms["end_to_end"]
    if budgets.max_jitter_ms is not None:
        checks.append(_jitter_check(e2e, budgets.max_jitter_ms))
    if budgets.max_drift_ms is not None:
        first, last = drift_ms(e2e)
        if first is None:
            checks.append(BudgetCheck("end_to_end.drift_ms", budgets.max_drift_ms, None, INCONCLUSIVE, len(e2e), 3, "fewer than 3 frames"))
        else:
            drift = round(last - first, 4)
            status = FAIL if drift > budgets.max_drift_ms else PASS
            checks.append(
                BudgetCheck(
                    "end_to_end.drift_ms",
                    budgets.max_drift_ms,
                    drift,
                    status,
                    len(e2e),
                    3,
                    f"median first third {first:.4g} ms, last third {last:.4g} ms",
                )
            )
    if misses is not None and budgets.max_miss_ratio is not None:
        checks.append(_miss_ratio_check(misses, budgets.max_miss_ratio))
    if misses is not None and budgets.max_consecutive_misses is not None:
        status = FAIL if misses.longest_streak > budgets.max_consecutive_misses else PASS
        detail = f"deadline {misses.deadline_ms:g} ms; a dropped frame counts as a miss"
        checks.append(
            BudgetCheck("deadline.consecutive_misses", budgets.max_consecutive_misses, misses.longest_streak, status, misses.frames, None, detail)
        )
    if budgets.max_dropped is not None:
        status = PASS if dropped <= budgets.max_dropped else FAIL
        checks.append(BudgetCheck("dropped", float(budgets.max_dropped), float(dropped), status, dropped, 0))
    checks.extend(environment_checks)
    return combine(checks)


def _jitter_check(e2e: np.ndarray, limit: float) -> BudgetCheck:
    needed = frames_needed(0.999)
    if len(e2e) == 0:
        return BudgetCheck("end_to_end.jitter_ms", limit, None, INCONCLUSIVE, 0, needed, "no frames measured")
    jitter = round(quantile_estimate(e2e, 0.999).value - quantile_estimate(e2e, 0.5).value, 4)
    enough = len(e2e) >= needed  # p99.9 has an upper bound only from 2995 frames on
    status = FAIL if jitter > limit else PASS if enough else INCONCLUSIVE
    return BudgetCheck("end_to_end.jitter_ms", limit, jitter, status, len(e2e), needed, "p99.9 - p50")


def combine(checks: list[BudgetCheck]) -> tuple[str, list[BudgetCheck], list[str]]:
    notes: list[str] = []
    if not checks:
        notes.append("the pipeline declares no budgets: nothing was checked")
        return INCONCLUSIVE, checks, notes
    statuses = {c.status for c in checks}
    verdict = FAIL if FAIL in statuses else INCONCLUSIVE if INCONCLUSIVE in statuses else PASS
    for c in checks:
        if c.status == INCONCLUSIVE and on_labels(c.name) and not c.frames:
            notes.append(f"{c.name}: {c.detail}")  # a budget on labels in a run without labels
        elif c.status == INCONCLUSIVE:
            needed = f"{c.frames_needed} needed" if c.frames_needed else "more needed"
            notes.append(f"{c.name}: {c.frames} {counted(c.name)}(s) measured, {needed} for a {int(CONFIDENCE * 100)}% bound ({c.detail})")
        elif c.status == WARN:
            notes.append(f"{c.name}: {'unverified' if c.unverified else 'warning'}: {c.detail}")
    return verdict, checks, notes


def on_labels(name: str) -> bool:
    """Whether a check is a budget on labels (mAP, a class's recall at precision), judged over labelled images."""
    return name.startswith(("accuracy.map", "accuracy.min_recall_at_precision."))


def counted(name: str) -> str:
    """What a check counts: labelled images (the budgets on labels, `sdk evaluate`) or frames."""
    return "image" if on_labels(name) else "frame"


def describe_verdict(verdict: str, checks: list[dict]) -> str:
    """The verdict with what it does not cover: "PASS", "PASS, 2 unverified", "FAIL, 1 unverified, 1 warning".

    Unverified: a requirement that could not be read here (whatever its status); warning: one that was
    read, unmet, and that the pipeline only warns about."""
    unverified = sum(bool(c.get("unverified")) for c in checks)
    warnings = sum(c["status"] == WARN and not c.get("unverified") for c in checks)
    parts = [verdict]
    if unverified:
        parts.append(f"{unverified} unverified")
    if warnings:
        parts.append(f"{warnings} warning{'s' if warnings > 1 else ''}")
    return ", ".join(parts)


UNITS = {
    "deadline.miss_ratio": "fraction of frames",
    "deadline.consecutive_misses": "frames",
    "dropped": "frames",
    "environment.max_temperature_c": "°C",
    "environment.max_load": "1-min load average",
    "end_to_end.jitter_ms": "ms",
    "end_to_end.drift_ms": "ms",
}


SHORT_UNITS = ("ms", "°C", "frames")  # written after a number; the others only name a column


def check_unit(name: str) -> str:
    """The unit of a check's measured value and limit, for people ("" where it has none)."""
    if name in UNITS:
        return UNITS[name]
    if name.endswith("_ms"):
        return "ms"
    if name.startswith("accuracy."):
        return "" if name.endswith("mean_iou") else "fraction"
    if name.startswith("determinism."):
        return "frames outside tolerance"
    return ""


def format_number(value) -> str:
    """A number as people write it: 4 significant digits, thousands separators, never an exponent (1e+05)."""
    if value is None:
        return "not measured"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int) or float(value).is_integer() and abs(value) >= 1:
        return f"{int(value):,}"
    if not math.isfinite(value):
        return str(value)
    if value == 0:
        return "0"
    magnitude = math.floor(math.log10(abs(value)))
    if magnitude >= 3:
        return f"{value:,.0f}"
    decimals = min(max(3 - magnitude, 0), 12)
    text = f"{value:,.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text
