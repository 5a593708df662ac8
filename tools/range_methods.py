"""INT8 ranges from activation statistics: TensorRT's entropy calibration, percentile and min-max.

Written by hand because ONNX Runtime's calibrators do not do what TensorRT does: its entropy
calibrator histograms signed values and, with its defaults (128 bins, 128 quantized bins), tries a
single threshold, the full range, so it returns min-max under another name. TensorRT's entropy
calibration (NVIDIA, "8-bit Inference with TensorRT", GTC 2017; the same algorithm as
pytorch-quantization's reference) works on a 2048-bin histogram of |x| over [0, amax] and keeps the
threshold whose INT8 image of the distribution loses the least information (Kullback-Leibler).
"""

from __future__ import annotations

import numpy as np

HISTOGRAM_BINS = 2048
QUANTIZED_BINS = 128  # the positive half of signed INT8
FIRST_CANDIDATE = QUANTIZED_BINS  # a threshold below 128 bins would merge nothing


def entropy_threshold_bins(histogram: np.ndarray) -> int:
    """The number of leading bins i (128..len) whose threshold i * bin_width minimises
    KL(P || Q), where P is the histogram cut at i with the clipped outliers added to its last bin and
    Q is P's first i bins merged into 128 INT8 levels and spread back evenly over each level's
    non-empty bins. Ties go to the largest threshold.

    Vectorised over every candidate with prefix sums: for candidate i, level g holds bins
    [ceil(g*i/128), ceil((g+1)*i/128)), so each level's count and non-empty-bin count are two
    differences of prefix sums, and the divergence is a sum over 128 levels instead of i bins."""
    counts = np.asarray(histogram, dtype=np.float64).copy()
    if counts.ndim != 1 or counts.size < FIRST_CANDIDATE:
        raise ValueError(f"entropy calibration needs a 1-D histogram of at least {FIRST_CANDIDATE} bins, got shape {counts.shape}")
    # Exact zeros (ReLU's) quantize exactly at any scale, yet their mass in bin 0 would dominate the
    # divergence; like NVIDIA's reference, bin 0 takes bin 1's count.
    counts[0] = counts[1]
    total = counts.sum()
    if total <= 0:
        return counts.size
    size = counts.size
    candidates = np.arange(FIRST_CANDIDATE, size + 1)
    prefix = np.concatenate([[0.0], np.cumsum(counts)])
    nonempty = np.concatenate([[0], np.cumsum(counts > 0)])
    xlogx = np.where(counts > 0, counts * np.log(np.where(counts > 0, counts, 1.0)), 0.0)
    prefix_xlogx = np.concatenate([[0.0], np.cumsum(xlogx)])

    levels = np.arange(QUANTIZED_BINS + 1)
    edges = -(-(levels[None, :] * candidates[:, None]) // QUANTIZED_BINS)  # ceil(g*i/128), shape (candidates, 129)
    level_counts = prefix[edges[:, 1:]] - prefix[edges[:, :-1]]
    level_nonempty = nonempty[edges[:, 1:]] - nonempty[edges[:, :-1]]
    spread = np.where(level_nonempty > 0, level_counts / np.maximum(level_nonempty, 1), 1.0)
    # sum_j P_j log Q_j over the unclipped bins: every non-empty bin of a level has Q = count / non-empty.
    p_log_q = np.sum(np.where(level_counts > 0, level_counts * np.log(np.where(level_counts > 0, spread, 1.0)), 0.0), axis=1)

    last = counts[candidates - 1]
    outliers = total - prefix[candidates]
    last_with_outliers = last + outliers
    # P's last bin carries the outliers; Q's last bin is its level's spread if bin i-1 is non-empty,
    # else zero, which makes the divergence infinite when outliers land there.
    last_level = (QUANTIZED_BINS - 1) * np.ones_like(candidates)
    last_spread = spread[np.arange(candidates.size), last_level]
    with np.errstate(divide="ignore", invalid="ignore"):
        p_log_q = p_log_q + np.where(outliers > 0, outliers * np.log(np.where(last > 0, last_spread, 1.0)), 0.0)
        p_log_p = (
            prefix_xlogx[candidates - 1]
            + np.where(last_with_outliers > 0, last_with_outliers * np.log(np.where(last_with_outliers > 0, last_with_outliers, 1.0)), 0.0)
        )
        kept = prefix[candidates]  # Q's mass before normalising: the unclipped counts
        divergence = (p_log_p - p_log_q) / total - np.log(total) + np.log(kept)
    divergence = np.where((outliers > 0) & (last == 0), np.inf, divergence)
    divergence = np.where(kept > 0, divergence, np.inf)
    # Rounding noise of the closed form must not pick a smaller threshold over an equal one.
    best = np.nanmin(divergence)
    ties = np.flatnonzero(divergence <= best + 1e-12 * max(1.0, abs(best)))
    return int(candidates[ties[-1]])


def entropy_amax(histogram: np.ndarray, amax: float) -> float:
    """TensorRT's entropy threshold for a histogram of |x| over [0, amax]."""
    bins = entropy_threshold_bins(histogram)
    return float(amax) * bins / len(histogram)


def percentile_amax(histogram: np.ndarray, amax: float, percentile: float) -> float:
    """The upper edge of the bin where the cumulative share of |x| reaches `percentile` %."""
    counts = np.asarray(histogram, dtype=np.float64)
    total = counts.sum()
    if total <= 0:
        return float(amax)
    cumulative = np.cumsum(counts)
    # In counts, with a relative tolerance: 99.9 / 100 * 1000 is 999.0000000000001 in floating point.
    index = int(np.searchsorted(cumulative, percentile / 100.0 * total * (1 - 1e-12), side="left"))
    return float(amax) * min(index + 1, counts.size) / counts.size
