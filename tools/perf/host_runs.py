"""What a model's run pays beyond its kernels, for the host's peaks (tools/perf/host_peaks.py): waking ONNX Runtime's
threads after other work (the wake probe, decision 1255), and a node's time in a run without ONNX Runtime's profiler
(the plain chains, decision 1263)."""

from __future__ import annotations

import numpy as np

# The wake probe's gap between runs, filled with arithmetic on the calling thread (a frame's preprocessing and decoding):
# longer than ONNX Runtime's threads spin after a run. Measured here over a whole run (decision 1255): 0.06-0.09 ms of
# waking after 5 ms of work, 0.12-0.21 ms after 20 ms, 0.11-0.23 ms after 5-20 ms of sleep (idle cores park deeper).
WAKE_GAP_S = 0.005
# The kernels of the wake probe's first layer, as the host model groups them: its input's NCHWc reorder and its first
# convolution. They pay the waking (0.045-0.064 ms and 0.01-0.03 ms here), the later ones next to nothing; a run's
# kernels together differ by more than that from run to run (decision 1264).
WAKE_KERNELS = 2


def wake_from(in_row: list[float], after_work: list[float]) -> float:
    """What a run's first kernels take beyond their median in a row when each run follows other work (ms, at least 0)."""
    if not in_row or not after_work:
        return 0.0
    return max(float(np.median(after_work)) - float(np.median(in_row)), 0.0)


def work_between_frames(seconds: float) -> None:
    """Arithmetic on the calling thread for `seconds`, over a preprocessed frame's floats (300 x 300 x 3)."""
    import time

    frame = np.linspace(0.0, 1.0, 300 * 300 * 3, dtype=np.float32)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        float((frame * 1.01 + 0.5).sum())


def plain_node_ms(long_model: bytes, one_model: bytes, feeds: dict, nodes: int, threads: int | None, spinning: bool, runs: int) -> float:
    """A node's time in a run without the profiler: runs of a chain of `nodes` and of its one node in turn, in
    sessions as the pipeline's (the first run of each not kept); (median of the chain - median of the one) / (nodes -
    1): the run's own entry and exit cancel out."""
    import time

    import onnxruntime as ort

    from sdk.backends.onnxruntime_cpu import session_options

    options = session_options(threads, spinning=spinning)
    sessions = [ort.InferenceSession(m, options, providers=["CPUExecutionProvider"]) for m in (long_model, one_model)]
    times: list[list[float]] = [[], []]
    for i in range(runs):
        for which, session in enumerate(sessions):
            start = time.perf_counter()
            session.run(None, feeds)
            if i:
                times[which].append((time.perf_counter() - start) * 1e3)
    return max((float(np.median(times[0])) - float(np.median(times[1]))) / (nodes - 1), 0.0)


def measure_wake(probe, runs: int, gap_s: float = WAKE_GAP_S, between=work_between_frames) -> float:
    """`runs` runs in a row (the first, cold, not kept), then `runs` each after `gap_s` of other work: wake_from of the
    two, over each run's first layer (WAKE_KERNELS)."""
    for _ in range(runs):
        probe.run()
    for _ in range(runs):
        between(gap_s)
        probe.run()
    totals = probe.first_kernels(WAKE_KERNELS)
    return wake_from(totals[1:runs], totals[runs:])
