"""The wake probe (tools/perf/host_runs.py) and its term in the host prediction (tools/perf/predict.py): a run
that starts after its threads have slept pays for waking them, once, in the first nodes it runs (decision 1255)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from tests.tools.perf.peaks import FIXED
from tests.tools.perf.test_node_chains import _conv_mul_add
from tools.perf import host_peaks as hp
from tools.perf import host_runs
from tools.perf.predict import predict_host


def test_the_wake_is_what_a_run_after_other_work_takes_beyond_a_run_in_a_row():
    assert host_runs.wake_from([1.0, 1.1, 0.9], [1.2, 1.3, 1.25]) == pytest.approx(0.25)
    assert host_runs.wake_from([1.0, 1.1, 0.9], [0.8, 0.9, 1.0]) == 0.0  # a quieter moment for the later runs: nothing, not less
    assert host_runs.wake_from([], [1.0]) == 0.0


def test_the_probe_runs_in_a_row_then_each_after_other_work():
    events: list[str] = []

    class Probe:
        def run(self) -> None:
            events.append("run")

        def first_kernels(self, count: int) -> list[float]:
            assert count == host_runs.WAKE_KERNELS
            return [9.0, 1.0, 1.2, 0.8, 1.5, 1.6, 1.4, 1.5]  # the first cold, three in a row, four after other work

    assert host_runs.measure_wake(Probe(), 4, gap_s=0.005, between=lambda seconds: events.append(f"work {seconds}")) == pytest.approx(0.5)
    assert events == ["run"] * 4 + ["work 0.005", "run"] * 4


def test_the_work_between_frames_takes_its_time_on_the_calling_thread():
    import time

    started, cpu = time.perf_counter(), time.thread_time()
    host_runs.work_between_frames(0.02)
    assert time.perf_counter() - started >= 0.02 and time.thread_time() - cpu > 0.0


def test_each_run_of_a_real_probe_gives_its_first_layers_kernels_together(tmp_path):
    model, feeds, _ = hp.probe_set(32 << 20, ("parallel",))["parallel"]
    probe = hp._Probe("wake", model, feeds, 2, False, tmp_path)
    for _ in range(3):
        probe.run()
    seen, read = {}, probe._trace
    probe._trace = lambda: seen.setdefault("trace", read())  # the parsed trace, kept to check against
    first = probe.first_kernels(host_runs.WAKE_KERNELS)
    runs, nodes = seen["trace"]
    assert [node["op"] for node in nodes[:2]] == ["ReorderInput", "Conv"]  # the first layer, as the host model groups it
    assert len(first) == len(runs) == 3 and all(total > 0 for total in first)
    assert first == pytest.approx([a + b for a, b in zip(nodes[0]["times_ms"], nodes[1]["times_ms"], strict=True)])
    assert not list(tmp_path.glob(".probe-*"))  # the trace is read and removed


def test_the_first_layer_pays_the_wake_once():
    model = _conv_mul_add()
    rested = predict_host(model, FIXED, block=0)
    woken = predict_host(model, replace(FIXED, wake_ms=0.07), block=0)
    first, before = woken.layers[0], rested.layers[0]
    assert first.ms - before.ms == pytest.approx(0.07) and first.launch_ms - before.launch_ms == pytest.approx(0.07)
    assert sum(first.shares) == pytest.approx(first.ms)  # the members' parts still add up to the group
    assert [p.ms for p in woken.layers[1:]] == [p.ms for p in rested.layers[1:]]
    assert woken.total_ms - rested.total_ms == pytest.approx(0.07)
    assert np.isclose(rested.total_ms, predict_host(model, replace(FIXED, wake_ms=0.0), block=0).total_ms)
