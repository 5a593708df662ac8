"""Distribution-free statistics for latency acceptance: order-statistic bounds, misses, streaks, drift.

A percentile measured on n frames is an estimate. What a safety reviewer can sign is a bound:
for sorted samples x(1) <= ... <= x(n) of a continuous distribution, P(x(k) >= the q-quantile)
= P(Binomial(n, q) < k), whatever the distribution. So the smallest k with that probability at
or above the confidence gives a one-sided upper bound, the largest k with P(Binomial(n, q) >= k)
at or above it a lower bound. When even x(n) is not enough (1 - q^n < confidence) no upper bound
exists at that sample size. Written here with numpy rather than scipy, which the device lacks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

CONFIDENCE = 0.95


def binomial_cdf(n: int, p: float) -> np.ndarray:
    """P(Binomial(n, p) <= k) for k = 0..n, computed in log space (n up to millions)."""
    k = np.arange(n + 1, dtype=np.float64)
    if p <= 0.0:
        return np.ones(n + 1)
    if p >= 1.0:
        out = np.zeros(n + 1)
        out[-1] = 1.0
        return out
    log_factorial = np.concatenate(([0.0], np.cumsum(np.log(np.arange(1, n + 1, dtype=np.float64)))))
    log_pmf = log_factorial[n] - log_factorial - log_factorial[::-1] + k * math.log(p) + (n - k) * math.log1p(-p)
    return np.minimum(np.cumsum(np.exp(log_pmf)), 1.0)


def frames_needed(quantile: float, confidence: float = CONFIDENCE) -> int:
    """The fewest frames for which the sample maximum bounds the quantile: 1 - q^n >= confidence."""
    if quantile >= 1.0:
        return 1
    return math.ceil(math.log(1 - confidence) / math.log(quantile))


@dataclass(frozen=True)
class QuantileEstimate:
    """The measured order statistic and its one-sided distribution-free confidence bounds (None: no bound at this n)."""

    quantile: float
    value: float | None
    lower: float | None
    upper: float | None
    lower_rank: int | None  # 1-based rank of the order statistic used as a bound
    upper_rank: int | None


def quantile_estimate(values: np.ndarray, quantile: float, confidence: float = CONFIDENCE) -> QuantileEstimate:
    n = len(values)
    if n == 0:
        return QuantileEstimate(quantile, None, None, None, None, None)
    ordered = np.sort(values)
    if quantile >= 1.0:  # the sample maximum: an observation, never a bound on the worst case
        top = float(ordered[-1])
        return QuantileEstimate(quantile, top, top, None, n, None)
    # The measured value: the smallest sample at or above the quantile (numpy's inverted_cdf).
    value = float(ordered[max(math.ceil(quantile * n) - 1, 0)])
    cdf = binomial_cdf(n, quantile)
    # upper: smallest k with P(Bin < k) = cdf[k-1] >= confidence
    upper_candidates = np.nonzero(cdf[:n] >= confidence)[0]
    upper_rank = int(upper_candidates[0]) + 1 if len(upper_candidates) else None
    # lower: largest k with P(Bin >= k) = 1 - cdf[k-1] >= confidence
    lower_candidates = np.nonzero(1.0 - cdf[:n] >= confidence)[0]
    lower_rank = int(lower_candidates[-1]) + 1 if len(lower_candidates) else None
    return QuantileEstimate(
        quantile,
        value,
        float(ordered[lower_rank - 1]) if lower_rank else None,
        float(ordered[upper_rank - 1]) if upper_rank else None,
        lower_rank,
        upper_rank,
    )


def proportion_upper_bound(events: int, trials: int, confidence: float = CONFIDENCE) -> float:
    """Clopper-Pearson one-sided upper bound of a rate seen `events` times in `trials` (bisection on the binomial CDF)."""
    if trials == 0:
        return 1.0
    if events >= trials:
        return 1.0
    low, high = events / trials, 1.0
    for _ in range(60):
        mid = (low + high) / 2
        if binomial_cdf(trials, mid)[events] > 1 - confidence:
            low = mid
        else:
            high = mid
    return high


def longest_run(flags: np.ndarray) -> int:
    """The longest run of True values."""
    if len(flags) == 0 or not flags.any():
        return 0
    padded = np.concatenate(([0], flags.astype(np.int8), [0]))
    edges = np.diff(padded)
    return int((np.nonzero(edges == -1)[0] - np.nonzero(edges == 1)[0]).max())


@dataclass(frozen=True)
class DeadlineMisses:
    """Frames that missed the deadline, in source order; a dropped frame is a miss (it produced nothing)."""

    deadline_ms: float
    frames: int  # scheduled frames: measured + dropped within the measured span
    late: int
    dropped: int
    longest_streak: int
    miss_flags: np.ndarray  # per scheduled frame, source order

    @property
    def misses(self) -> int:
        return self.late + self.dropped

    @property
    def ratio(self) -> float:
        return self.misses / self.frames if self.frames else 0.0


def deadline_misses(frame_indices: np.ndarray, end_to_end_ms: np.ndarray, deadline_ms: float) -> DeadlineMisses:
    """Misses over the span of source frames the run measured; gaps in the frame numbers are drops."""
    if len(frame_indices) == 0:
        return DeadlineMisses(deadline_ms, 0, 0, 0, 0, np.zeros(0, bool))
    order = np.argsort(frame_indices, kind="stable")
    indices = frame_indices[order]
    span = int(indices[-1] - indices[0]) + 1
    flags = np.ones(span, bool)  # every scheduled frame misses unless it was measured in time
    flags[indices - indices[0]] = end_to_end_ms[order] > deadline_ms
    late = int((end_to_end_ms > deadline_ms).sum())
    return DeadlineMisses(deadline_ms, span, late, span - len(indices), longest_run(flags), flags)


def drift_ms(values: np.ndarray) -> tuple[float | None, float | None]:
    """Median of the first and of the last third: a pipeline that heats up or leaks shows here."""
    third = len(values) // 3
    if third == 0:
        return None, None
    return float(np.median(values[:third])), float(np.median(values[-third:]))
