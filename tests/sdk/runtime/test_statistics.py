"""Order-statistic bounds, binomial tails, deadline misses and streaks, against known distributions."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from sdk.runtime.statistics import (
    binomial_cdf,
    deadline_misses,
    drift_ms,
    frames_needed,
    longest_run,
    proportion_upper_bound,
    quantile_estimate,
)


@pytest.mark.parametrize(("n", "p"), [(10, 0.5), (300, 0.99), (5000, 0.999), (40_000, 0.9999), (7, 0.0), (7, 1.0)])
def test_binomial_cdf_matches_scipy(n, p):
    assert np.allclose(binomial_cdf(n, p), stats.binom.cdf(np.arange(n + 1), n, p), atol=1e-9)


def test_quantile_estimate_picks_the_exact_order_statistics():
    values = np.random.default_rng(1).permutation(np.arange(1, 1001, dtype=float))  # 1 .. 1000, shuffled
    est = quantile_estimate(values, 0.99)
    assert est.value == 990  # the smallest sample at or above the 99th percentile
    # Bounds are the order statistics whose binomial tails first reach 95 %, computed independently here.
    upper = next(k for k in range(1, 1001) if stats.binom.cdf(k - 1, 1000, 0.99) >= 0.95)
    lower = max(k for k in range(1, 1001) if stats.binom.sf(k - 1, 1000, 0.99) >= 0.95)
    assert (est.upper_rank, est.upper, est.lower_rank, est.lower) == (upper, float(upper), lower, float(lower))
    assert lower < 990 < upper


def test_no_upper_bound_below_the_frames_needed():
    needed = frames_needed(0.999)
    assert needed == 2995
    assert quantile_estimate(np.ones(needed - 1), 0.999).upper is None
    assert quantile_estimate(np.ones(needed), 0.999).upper == 1.0
    top = quantile_estimate(np.array([3.0, 1.0, 2.0]), 1.0)
    assert top.value == 3.0 and top.upper is None  # a maximum is never a bound


def test_upper_bounds_cover_the_true_percentile_at_the_stated_rate():
    """Seeded simulation: exponential latencies, the true p99 known in closed form."""
    rng = np.random.default_rng(7)
    true_p99 = -np.log(1 - 0.99)
    trials, n = 2000, 600
    covered = sum(quantile_estimate(rng.exponential(size=n), 0.99).upper >= true_p99 for _ in range(trials))
    rate = covered / trials
    # At least 95 % (minus 3 sigma of the simulation), and not a bound so loose that it always covers.
    assert 0.95 - 3 * np.sqrt(0.95 * 0.05 / trials) <= rate < 0.995


def test_proportion_upper_bound_is_clopper_pearson():
    assert proportion_upper_bound(0, 299) == pytest.approx(1 - 0.05 ** (1 / 299), abs=1e-9)
    assert proportion_upper_bound(3, 1000) == pytest.approx(stats.beta.ppf(0.95, 4, 997), abs=1e-9)
    assert proportion_upper_bound(5, 5) == 1.0


def test_longest_run():
    assert longest_run(np.array([], bool)) == 0
    assert longest_run(np.array([0, 0, 0], bool)) == 0
    assert longest_run(np.array([1, 1, 0, 1, 1, 1, 0, 1], bool)) == 3


def test_deadline_misses_count_late_and_dropped_frames_as_one_streak():
    frames = np.array([0, 1, 2, 3, 6, 7, 8])  # 4 and 5 were dropped
    e2e = np.array([10, 40, 10, 40, 40, 10, 10], float)
    misses = deadline_misses(frames, e2e, deadline_ms=33.3)
    assert (misses.frames, misses.late, misses.dropped, misses.misses) == (9, 3, 2, 5)
    assert misses.longest_streak == 4  # frame 3 late, 4 and 5 dropped, 6 late
    assert misses.ratio == pytest.approx(5 / 9)


def test_drift_compares_the_first_and_last_third():
    assert drift_ms(np.array([1.0, 2.0])) == (None, None)
    assert drift_ms(np.array([1, 1, 1, 5, 5, 5, 9, 9, 9], float)) == (1.0, 9.0)
