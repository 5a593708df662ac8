"""The reference probes between a profile's frames (sdk/profiling/reference.py), run by ONNX Runtime: each probe's kept
runs, and for the probe listed with `first` its first layer's kernels in every run, the cold runs apart."""

from __future__ import annotations

from sdk.profiling.reference import ReferenceProbes
from tools.perf.host_runs import WAKE_KERNELS
from tools.perf.host_speed import BURST, LONG, LONG_BURST, WAKE_PROBE, write_reference


def test_the_bursts_give_each_probes_kept_runs_and_the_wake_probes_first_layer_cold_and_kept(tmp_path):
    probes = ReferenceProbes(write_reference(tmp_path / "reference"), 2, False, tmp_path)
    for _ in range(4):  # the first burst goes with the warm-up frame
        probes.burst()
    found = probes.finish(skip_bursts=1)["probes"]
    assert len(found[WAKE_PROBE]["kernel_ms"]) == 3 * (BURST - 1) and len(found[LONG]["kernel_ms"]) == 3 * (LONG_BURST - 1)
    wake = found[WAKE_PROBE]
    assert len(wake["first_ms"]) == 3 * (BURST - 1) and len(wake["cold_first_ms"]) == 3
    # the first layer (its input's reorder and its first convolution) is part of the kept runs' own kernels, not all of them
    assert all(0 < first < kernel for first, kernel in zip(wake["first_ms"], wake["kernel_ms"], strict=True))
    assert [name for name, raw in found.items() if "first_ms" in raw] == [WAKE_PROBE] and WAKE_KERNELS == 2
    assert not list(tmp_path.glob(".reference-*"))  # the traces are read and removed
