"""What ONNX Runtime adds around each node it runs, on the host, from the host's chains of distinct nodes
(tools/perf/host_peaks.py): its own work after the node as its profiler times it (the time between two kernels), which
grows with the bytes the node reads and writes (decision 1264), and what the profiler itself adds to the node, its
time under the profiler less its time in a plain run (decision 1263)."""

from __future__ import annotations


def by_bytes(peaks, moved: int, at_hot: float, at_big: float | None) -> float:
    """What a node of `moved` bytes adds over a node of none, through the hot chain's value at its bytes (`at_hot`)
    and the big hot chain's (`at_big`; None: not measured): linear between them and beyond the last, never negative
    and never less for more bytes."""
    from tools.perf.host_peaks import bandwidth_sizes

    sizes = bandwidth_sizes(peaks.last_level_cache_bytes)
    points = [(0, 0.0), (sizes["hot"], max(at_hot, 0.0))]
    if at_big is not None:
        points.append((sizes["big"], max(at_big, points[-1][1])))
    # the segment that holds `moved`, or the last one, extended
    (low, low_ms), (high, high_ms) = next((a, b) for a, b in zip(points, points[1:], strict=False) if moved <= b[0] or b is points[-1])
    return low_ms + (high_ms - low_ms) * (moved - low) / (high - low)


def gap_after(peaks, moved: int, threaded: bool) -> float:
    """ONNX Runtime's own work after a node, as its profiler times it (ms): the time between the node's kernel and the
    next one's, with the run's start and end shared out over its nodes, as the chains measure it a node. From the
    parallel chain's after a threaded node (the launch chain's after any other), plus what the hot chains' nodes, which
    run on the pool, add over the parallel chain's at their bytes (`moved`: the node's activations, not its weights)."""
    base = peaks.parallel_gap_ms if threaded and peaks.threads > 1 else peaks.gap_ms
    big = peaks.big_gap_ms - peaks.parallel_gap_ms if peaks.big_gap_ms > 0 else None
    return base + by_bytes(peaks, moved, peaks.node_gap_ms - peaks.parallel_gap_ms, big)


def profiler_ms(peaks, threaded: bool) -> float:
    """What ONNX Runtime's profiler adds to a node (ms): a chain's time a node under the profiler (kernel and gap) less
    its time a node in a plain run; the parallel chain's for a threaded node, the launch chain's for any other
    (decision 1263)."""
    if threaded:
        return max(peaks.parallel_launch_ms + peaks.parallel_gap_ms - peaks.plain_parallel_ms, 0.0)
    return max(peaks.launch_ms + peaks.gap_ms - peaks.plain_node_ms, 0.0)


__all__ = ["by_bytes", "gap_after", "profiler_ms"]
