"""Figures of a run and their bootstrap replicates; differences with simultaneous confidence intervals; verdicts.

The bootstrap resamples a run's frames in blocks (circular block bootstrap): frames close in time share the
machine's state, so a series that comes in bursts or drifts is resampled with its bursts, and gets the wider
interval it deserves. The block length follows the series' own autocorrelation (of ranks, so one long frame does
not decide it). A side of several runs (a release measured more than once) is resampled in two levels, runs and
then frames within each run, and its figure is the mean of its runs' figures: the spread between runs counts.

Intervals are simultaneous over the figures of one comparison (Bonferroni): with confidence c, two samples of one
distribution have every figure's interval cover the true difference with probability at least c. A figure is
`worse` or `better` only when its whole interval lies beyond the minimum difference, `same` otherwise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from tools.history.noise import t_quantile

DRAWS = 2000
SEED = 20240611  # fixed: the same two runs compare the same way every time
CHUNK_ELEMENTS = 4_000_000  # draws x frames resampled at once (memory)
FLAT_LAGS = 5  # lags in a row the autocorrelation must stay within noise
REFERENCE_Z = 2.81  # a dozen figures at 95 %, Bonferroni: where the quantiles' intervals are read


@dataclass(frozen=True)
class Replicates:
    """A figure of one side: its value and DRAWS bootstrap replicates of it (None: not enough frames to resample)."""

    value: float | None
    draws: np.ndarray | None
    blocks: int = 0  # the independent blocks the draws rest on (their standard error has blocks - 1 degrees of freedom)


@dataclass(frozen=True)
class Difference:
    name: str
    a: float | None
    b: float | None
    difference: float | None
    interval: tuple[float, float] | None
    verdict: str  # better | worse | same
    lower_is_better: bool
    margin: float


def block_length(values: np.ndarray) -> int:
    """Frames per block: at least sqrt(n), and twice the first lag from which the autocorrelation of ranks stays below
    2/sqrt(n) for FLAT_LAGS lags (Politis and White's rule of thumb); at most n/10. Blocks shorter than the
    correlation cut it and shrink the interval; sqrt(n) keeps that bias small for short-range correlation too."""
    n = len(values)
    if n < 20:
        return 1
    floor = math.ceil(math.sqrt(n))
    cap = max(1, n // 10)
    ranks = np.argsort(np.argsort(values, kind="stable"), kind="stable").astype(np.float64)
    x = ranks - ranks.mean()
    spectrum = np.fft.rfft(x, 2 * n)
    acf = np.fft.irfft(spectrum * np.conj(spectrum))[:n]
    if acf[0] <= 0:
        return min(floor, cap)
    acf = np.abs(acf / acf[0])
    limit = 2.0 / math.sqrt(n)
    for lag in range(1, min(n // 2, cap) + 1):
        if np.all(acf[lag : lag + FLAT_LAGS] < limit):
            return int(min(max(floor, 2 * (lag - 1)), cap))
    return cap


def block_indices(rng: np.random.Generator, n: int, block: int, draws: int) -> np.ndarray:
    """(draws, n) frame indices: ceil(n / block) circular blocks per draw, at random starts."""
    blocks = -(-n // block)
    starts = rng.integers(0, n, size=(draws, blocks))
    return ((starts[:, :, None] + np.arange(block)) % n).reshape(draws, -1)[:, :n]


def _chunks(rng: np.random.Generator, n: int, block: int, draws: int):
    step = max(1, CHUNK_ELEMENTS // max(n, 1))
    for first in range(0, draws, step):
        yield block_indices(rng, n, block, min(step, draws - first))


def rank_of(n: int, quantile: float) -> int:
    """The order statistic report.json reports for a quantile (numpy's inverted_cdf): the smallest sample at or above it."""
    return max(math.ceil(quantile * n) - 1, 0)


def quantile_replicates(
    values: np.ndarray, quantiles: tuple[float, ...], rng: np.random.Generator, draws: int = DRAWS, z: float = REFERENCE_Z
) -> list[Replicates]:
    """Each quantile of `values` with replicates of its logarithm's sampling error (Woodruff's interval).

    Resampling a sample quantile directly gives a lumpy, unreliable spread (its bootstrap standard error converges
    at n^-1/4). Here the block bootstrap estimates what it estimates well, the standard error se_F of the share of
    frames at or below the quantile, and the quantile's interval is read off the frames' own order statistics:
    [Q(q - z se_F), Q(q + z se_F)], distribution-free, as wide on a heavy tail as the tail is. Its wider side in
    log(ms), over z, is the standard error the replicates carry (normal draws around the value)."""
    n = len(values)
    if n == 0:
        return [Replicates(None, None) for _ in quantiles]
    ordered = np.sort(values)
    points = [float(ordered[rank_of(n, q)]) for q in quantiles]
    if n < 2 or ordered[0] <= 0:
        return [Replicates(p, None) for p in points]
    block = block_length(values)
    blocks = -(-n // block)
    starts = rng.integers(0, n, size=(draws, blocks))
    out = []
    for quantile, point in zip(quantiles, points, strict=True):
        below = (values <= point).astype(np.float64)[:, None]
        share = block_sums(below, block)[starts].sum(axis=1)[:, 0] / (blocks * block)
        error = max(float(np.std(share, ddof=1)), math.sqrt(quantile * (1 - quantile) / n), 0.5 / n)
        low = float(ordered[rank_of(n, max(quantile - z * error, 0.0))])
        high = float(ordered[rank_of(n, min(quantile + z * error, 1.0))])
        log_error = max(math.log(high / point), math.log(point / low), 1e-9) / z  # the wider side: tails are not symmetric
        out.append(Replicates(point, point * np.exp(log_error * rng.standard_normal(draws)), blocks))
    return out


def block_sums(rows: np.ndarray, block: int) -> np.ndarray:
    """The sum of every circular block of `block` frames, by its first frame (rows: frames x columns)."""
    n = len(rows)
    doubled = np.concatenate([rows, rows[: block - 1]]) if block > 1 else rows
    running = np.concatenate([np.zeros((1, rows.shape[1])), np.cumsum(doubled, axis=0)])
    return running[block : block + n] - running[:n]


def sum_replicates(rows: np.ndarray, rng: np.random.Generator, draws: int = DRAWS) -> tuple[np.ndarray, np.ndarray | None, int]:
    """Column sums of (frames x columns) and their replicates (draws x columns): each draw is ceil(n / block) whole
    circular blocks, scaled to n frames (the figures made of these sums are ratios and means)."""
    rows = np.asarray(rows, np.float64).reshape(len(rows), -1)
    n = len(rows)
    totals = rows.sum(axis=0)
    if n < 2:
        return totals, None, 0
    block = block_length(rows.sum(axis=1))
    blocks = -(-n // block)
    starts = rng.integers(0, n, size=(draws, blocks))
    return totals, block_sums(rows, block)[starts].sum(axis=1) * (n / (blocks * block)), blocks


def mean_replicates(values: np.ndarray, rng: np.random.Generator, draws: int = DRAWS) -> Replicates:
    n = len(values)
    if n == 0:
        return Replicates(None, None)
    total, replicates, blocks = sum_replicates(values[:, None], rng, draws)
    return Replicates(float(total[0] / n), None if replicates is None else replicates[:, 0] / n, blocks)


def pool(sides: list[Replicates], rng: np.random.Generator, draws: int = DRAWS) -> Replicates:
    """Several runs of one side: the mean of their figures, resampled in two levels (runs, then each run's own draws)."""
    known = [s for s in sides if s.value is not None]
    if not known:
        return Replicates(None, None)
    value = float(np.mean([s.value for s in known]))
    if len(known) == 1:
        return Replicates(value, known[0].draws)
    if any(s.draws is None for s in known):
        return Replicates(value, None)
    table = np.stack([s.draws for s in known])  # runs x draws
    picks = rng.integers(0, len(known), size=(draws, len(known)))
    columns = rng.integers(0, table.shape[1], size=(draws, len(known)))
    return Replicates(value, table[picks, columns].mean(axis=1), sum(s.blocks for s in known))


def verdict_of(low: float, high: float, margin: float, lower_is_better: bool) -> str:
    """`worse` or `better` when the whole interval of B - A lies beyond the margin on that side, else `same`."""
    if lower_is_better:
        return "worse" if low > margin else "better" if high < -margin else "same"
    return "better" if low > margin else "worse" if high < -margin else "same"


def judge(name: str, a: Replicates, b: Replicates, *, lower_is_better: bool, alpha: float, margin: float) -> Difference:
    """The difference b - a, its (1 - alpha) interval, and its verdict against `margin` (same units).

    Positive figures (latencies) are compared as a ratio: log(B / A) +- z * its bootstrap standard error, so the
    interval is asymmetric as latencies are, and never says B could be below zero. Figures that can be zero (a miss
    ratio, accuracy) as a difference: B - A +- z * its standard error. A normal interval on the replicates' spread
    rather than their extreme percentiles: at the Bonferroni tails of a dozen figures a few thousand draws leave
    only a handful of replicates beyond each end, too few to place it. The quantile is Student's t on the blocks'
    degrees of freedom: the standard error itself is estimated from those blocks."""
    if a.value is None or b.value is None:
        return Difference(name, a.value, b.value, None, None, "same", lower_is_better, margin)
    difference = b.value - a.value
    if a.draws is None or b.draws is None:
        return Difference(name, a.value, b.value, difference, None, "same", lower_is_better, margin)
    degrees = min(a.blocks, b.blocks) - 1  # the standard error is an estimate from that many blocks: Student's t
    z = t_quantile(1 - alpha / 2, degrees) if degrees >= 1 else NormalDist().inv_cdf(1 - alpha / 2)
    if a.value > 0 and b.value > 0 and np.all(a.draws > 0) and np.all(b.draws > 0):
        error = math.sqrt(np.var(np.log(a.draws), ddof=1) + np.var(np.log(b.draws), ddof=1))
        low, high = b.value * math.exp(-z * error) - a.value, b.value * math.exp(z * error) - a.value
    else:
        error = math.sqrt(np.var(a.draws, ddof=1) + np.var(b.draws, ddof=1))
        low, high = difference - z * error, difference + z * error
    return Difference(name, a.value, b.value, difference, (low, high), verdict_of(low, high, margin, lower_is_better), lower_is_better, margin)
