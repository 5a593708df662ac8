"""TensorRT's entropy threshold, percentile and their edge cases, against a direct implementation."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import rel_entr
from scipy.stats import entropy

from tools.int8.range_methods import covered_bins, entropy_amax, entropy_threshold_bins, percentile_amax

BINS = 2048  # TensorRT's histogram; the search takes any length (the one-pass grid gives 2049..4096)


def kl_divergence(reference: np.ndarray, candidate: np.ndarray) -> float:
    """scipy.stats.entropy(reference, candidate) on two 1-D float64 histograms, step for step (each normalised by its
    sum, rel_entr, summed): the same number, without its array-API dispatch (0.7 ms a call, ~12,000 calls in this file's
    direct searches; 0.04 ms here). test_the_kl_divergence_is_scipys checks it equal to scipy's, bit for bit."""
    return float(np.sum(rel_entr(reference / np.sum(reference), candidate / np.sum(candidate))))


def test_the_kl_divergence_is_scipys():
    rng = np.random.default_rng(11)
    for size in (128, 1500, 2048):
        reference, candidate = rng.integers(0, 1000, size).astype(np.float64), rng.integers(1, 1000, size).astype(np.float64)
        reference[::7] = 0  # empty reference bins, as a histogram has
        assert kl_divergence(reference, candidate) == float(entropy(reference, candidate))


def direct_threshold_bins(histogram: np.ndarray, first: int = 128) -> int:
    """The GTC 2017 algorithm, one candidate at a time, as written on the slides."""
    counts = histogram.astype(np.float64).copy()
    counts[0] = counts[1]
    best, best_bins = np.inf, len(counts)
    for i in range(first, len(counts) + 1):
        reference = counts[:i].copy()
        reference[-1] += counts[i:].sum()
        level = (np.arange(i) * 128) // i
        # Each level's count spread evenly over its non-empty bins. Summed per level with bincount (one pass
        # instead of 128 masks per candidate: the reference took ~10 s a histogram); the counts are whole
        # numbers, so every level sum is exact and the candidate is bit for bit what the per-level loop gave.
        nonempty = counts[:i] > 0
        level_counts = np.bincount(level, weights=counts[:i], minlength=128)
        level_nonempty = np.bincount(level, weights=nonempty, minlength=128)
        candidate = np.where(nonempty, level_counts[level] / np.maximum(level_nonempty[level], 1), 0.0)
        divergence = np.inf if (candidate[reference > 0] == 0).any() else kl_divergence(reference, candidate)
        if divergence <= best + 1e-12 * max(1.0, abs(best)):
            best, best_bins = min(best, divergence), i
    return best_bins


def histogram_of(values: np.ndarray) -> tuple[np.ndarray, float, float]:
    """Counts, bin width and amax: TensorRT's grid, BINS bins over [0, amax]."""
    magnitude = np.abs(values)
    amax = float(magnitude.max())
    counts, _ = np.histogram(magnitude, BINS, range=(0, amax))
    return counts, amax / BINS, amax


@pytest.mark.parametrize(
    "values",
    [
        np.random.default_rng(0).standard_normal(200_000),
        np.random.default_rng(1).laplace(size=200_000),
        np.clip(np.random.default_rng(2).normal(1.0, 2.0, 200_000), 0, 6),  # ReLU6: zeros and a spike at 6
        np.concatenate([np.random.default_rng(3).standard_normal(100_000), [40.0, -55.0]]),  # two outliers
        np.random.default_rng(4).integers(0, 50, 50_000).astype(float),  # sparse: most bins empty
    ],
    ids=["normal", "laplace", "relu6", "outliers", "sparse"],
)
def test_the_vectorised_threshold_equals_the_direct_algorithm(values):
    counts, _, _ = histogram_of(values)
    assert entropy_threshold_bins(counts) == direct_threshold_bins(counts)


def test_the_threshold_search_takes_a_histogram_of_any_length():
    counts, _, _ = histogram_of(np.random.default_rng(7).laplace(size=100_000))
    odd = counts[:1500].copy()  # a cut grid: 1500 bins, the outliers dropped
    assert entropy_threshold_bins(odd) == direct_threshold_bins(odd)
    assert entropy_threshold_bins(odd, 200) == direct_threshold_bins(odd, 200)


def test_entropy_clips_a_long_tail_and_keeps_a_bounded_distribution_whole():
    tail, width, amax = histogram_of(np.concatenate([np.random.default_rng(5).standard_normal(500_000), [60.0]]))
    assert entropy_amax(tail, width, amax) < 0.25 * amax  # one outlier at 60 sigma must not set the scale
    flat, width, amax = histogram_of(np.random.default_rng(6).uniform(-3, 3, 500_000))
    assert 0.95 * amax < entropy_amax(flat, width, amax) <= amax


def test_percentile_is_the_bin_edge_where_the_share_is_reached():
    counts = np.zeros(4096, np.int64)
    counts[:1000] = 1  # 1000 values spread over the first 1000 bins of width 0.5
    assert percentile_amax(counts, 0.5, 700.0, 99.9) == 499.5  # 999 values below bin 999's lower edge is 99.9 %
    assert percentile_amax(counts, 0.5, 700.0, 100.0) == 500.0
    assert percentile_amax(counts, 0.5, 499.7, 100.0) == 499.7  # never above the largest |x|
    assert percentile_amax(np.zeros(4096), 0.5, 3.0, 99.0) == 3.0


def test_the_entropy_search_covers_the_grid_up_to_amax_only():
    # The one-pass grid spans [0, R) with R the power of two above amax; bins past amax are empty.
    assert covered_bins(np.zeros(4096), 1 / 1024, 2.5) == 2561  # bins 0..2560 reach 2.5
    assert covered_bins(np.zeros(4096), 1 / 1024, 3.9999) == 4096
    counts = np.zeros(4096, np.int64)
    counts[:2561] = np.random.default_rng(8).integers(1, 100, 2561)
    # As in TensorRT (128 of its 2048 bins), no threshold below amax / 16: 160 of these finer bins.
    assert entropy_amax(counts, 1 / 1024, 2.5) == min(entropy_threshold_bins(counts[:2561], 160) / 1024, 2.5)
    spike = np.zeros(4096, np.int64)
    spike[:40] = 10**6  # everything far below amax / 16 but one outlier at amax
    spike[2560] = 1
    assert entropy_amax(spike, 1 / 1024, 2.5) >= 2.5 / 16
    # On TensorRT's own grid the first candidate is its 128.
    tensorrt, width, amax = histogram_of(np.random.default_rng(9).laplace(size=100_000))
    assert entropy_amax(tensorrt, width, amax) == entropy_threshold_bins(tensorrt) * width


def test_a_histogram_too_short_to_search_is_refused():
    with pytest.raises(ValueError, match="at least 128 bins"):
        entropy_threshold_bins(np.ones(64))
