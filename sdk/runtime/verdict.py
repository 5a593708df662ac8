"""Latency statistics and the acceptance verdict against the pipeline's budgets.

A measured percentile is only evidence when enough frames back it: with n samples the
largest is a 95 % upper confidence bound of the q-quantile once 1 - q^n >= 0.95, i.e.
n >= ln(0.05) / ln(q) (299 frames for p99, 2995 for p99.9). With fewer frames the check
is INCONCLUSIVE, never PASS, and the report says how many frames it would need.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from sdk.spec.schema import Budgets

PASS, FAIL, INCONCLUSIVE = "PASS", "FAIL", "INCONCLUSIVE"
CONFIDENCE = 0.95
QUANTILES = {"p50_ms": 0.50, "p99_ms": 0.99, "p999_ms": 0.999, "max_ms": 1.0}


def frames_needed(quantile: float, confidence: float = CONFIDENCE) -> int:
    if quantile >= 1.0:
        return 1
    return math.ceil(math.log(1 - confidence) / math.log(quantile))


def summarize(values_ms: np.ndarray, keys: tuple[str, ...] = ("p50_ms", "p99_ms", "max_ms")) -> dict[str, float | None]:
    """Percentiles as measured order statistics (the smallest sample at or above the quantile)."""
    if len(values_ms) == 0:
        return {key: None for key in (*keys, "mean_ms")}
    out: dict[str, float | None] = {}
    for key in keys:
        q = QUANTILES[key]
        value = values_ms.max() if q >= 1 else np.percentile(values_ms, q * 100, method="inverted_cdf")
        out[key] = round(float(value), 4)
    out["mean_ms"] = round(float(values_ms.mean()), 4)
    return out


@dataclass(frozen=True)
class BudgetCheck:
    name: str
    limit: float
    measured: float | None
    status: str
    frames: int
    frames_needed: int

    def as_dict(self) -> dict:
        return asdict(self)


def evaluate(budgets: Budgets, latencies_ms: dict[str, np.ndarray], dropped: int) -> tuple[str, list[BudgetCheck], list[str]]:
    """(verdict, checks, notes). FAIL beats INCONCLUSIVE beats PASS."""
    checks: list[BudgetCheck] = []
    groups = [("end_to_end", budgets.end_to_end)] + [(stage, limits) for stage, limits in budgets.stages.items()]
    for group, limits in groups:
        if limits is None:
            continue
        values = latencies_ms[group]
        n = len(values)
        for key, limit in limits.items():
            needed = frames_needed(QUANTILES[key])
            measured = summarize(values, (key,))[key]
            if measured is not None and key == "max_ms" and measured > limit:
                status = FAIL  # one frame over the maximum is conclusive at any sample size
            elif n < needed or measured is None:
                status = INCONCLUSIVE
            else:
                status = PASS if measured <= limit else FAIL
            checks.append(BudgetCheck(f"{group}.{key}", limit, measured, status, n, needed))
    if budgets.max_dropped is not None:
        status = PASS if dropped <= budgets.max_dropped else FAIL
        checks.append(BudgetCheck("dropped", float(budgets.max_dropped), float(dropped), status, dropped, 0))
    notes: list[str] = []
    if not checks:
        notes.append("the pipeline declares no budgets: nothing was checked")
        return INCONCLUSIVE, checks, notes
    statuses = {c.status for c in checks}
    verdict = FAIL if FAIL in statuses else INCONCLUSIVE if INCONCLUSIVE in statuses else PASS
    for c in checks:
        if c.status == INCONCLUSIVE:
            notes.append(f"{c.name}: {c.frames} frame(s) measured, {c.frames_needed} needed for a {int(CONFIDENCE * 100)}% bound")
    return verdict, checks, notes
