"""The one-pass counter: a histogram whose range grows by powers of two equals one taken afterwards
over the final range, bin for bin, however the values are split into frames and ordered."""

from __future__ import annotations

import numpy as np
import pytest

from sdk.errors import ModelError
from tools.int8.histogram_kernel import HISTOGRAM_BINS, ActivationCounter


def counted(frames: list[list[np.ndarray]], *, threads: int = 2) -> ActivationCounter:
    names = [f"t{i}" for i in range(len(frames[0]))]
    with ActivationCounter(names, threads=threads) as counter:
        for frame in frames:
            counter.add(list(enumerate(frame)))
    return counter


def after_the_fact(values: np.ndarray) -> tuple[np.ndarray, float]:
    magnitude = np.abs(values.astype(np.float64))
    top = 2.0 ** (np.floor(np.log2(magnitude.max())) + 1)
    counts, _ = np.histogram(magnitude, HISTOGRAM_BINS, range=(0, top))
    return counts, top


def test_a_growing_range_gives_the_histogram_of_the_final_range():
    rng = np.random.default_rng(0)
    frames = [
        [np.zeros(1000, np.float32)],  # zeros before any range exists
        [np.array([0.75, -0.75, 1e-30], np.float32)],  # the first range, 1; a tiny value in bin 0
        [np.array([1.0, -0.5], np.float32)],  # exactly the range: it doubles
        [rng.standard_normal(200_000).astype(np.float32) * 3],  # large: counted through the thread's scratch
        [np.array([-37.0, 64.0, 0.0], np.float32)],  # 64 is a power of two: the range becomes 128
        [rng.laplace(size=50_000).astype(np.float32)],  # small: counted straight
    ]
    counter = counted(frames)
    everything = np.concatenate([f[0] for f in frames])
    expected, top = after_the_fact(everything)
    assert top == 128.0 and counter.ranges[0] == 128.0 and counter.bin_width[0] == 128.0 / HISTOGRAM_BINS
    assert np.array_equal(counter.counts[0], expected)
    assert counter.minimum[0] == everything.min() and counter.maximum[0] == everything.max()


def test_the_order_of_frames_and_the_thread_count_do_not_matter():
    rng = np.random.default_rng(1)
    scales = (0.01, 5, 0.3, 900, 2)
    # The large tensor goes through each thread's scratch frame after frame (it must come back zeroed).
    frames = [[rng.standard_normal(100_000).astype(np.float32) * s, rng.random(7_000).astype(np.float32) * s] for s in scales]
    forward = counted(frames, threads=2)
    backward = counted(frames[::-1], threads=1)
    assert np.array_equal(forward.counts, backward.counts) and np.array_equal(forward.ranges, backward.ranges)
    for row in range(2):
        expected, _ = after_the_fact(np.concatenate([f[row] for f in frames]))
        assert np.array_equal(forward.counts[row], expected)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_a_value_that_is_not_finite_is_refused_with_its_tensor_named(bad):
    with pytest.raises(ModelError, match="NaN or infinity .* first 't1'"):
        counted([[np.ones(4, np.float32), np.array([1.0, bad], np.float32)]])


def test_the_counter_refuses_work_outside_its_block():
    counter = ActivationCounter(["t0"], threads=1)
    with pytest.raises(RuntimeError, match="outside its `with` block"):
        counter.add([(0, np.ones(3, np.float32))])
