"""Interference workers: they really load the machine while the run lasts, and none outlives it."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from sdk.errors import ConfigError
from sdk.runtime.interference import Interference, InterferencePlan


def cpu_seconds(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime + stime, in clock ticks
    return total / os.sysconf("SC_CLK_TCK")


def test_workers_burn_cpu_and_stream_memory_then_die():
    plan = InterferencePlan.parse("cpu=1,memory=1,memory_mb=16")
    assert plan.describe() == {"cpu_workers": 1, "memory_workers": 1, "memory_mb": 16}
    with Interference(plan) as stress:
        pids = [w.pid for w in stress._workers]
        # Busy workers accumulate CPU time however loaded the machine is; idle ones never reach half a second.
        deadline = time.monotonic() + 120
        while cpu_seconds(pids) <= 0.5 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert stress.running == 2
        assert cpu_seconds(pids) > 0.5
        rss_kb = int(next(line for line in Path(f"/proc/{pids[1]}/status").read_text().splitlines() if line.startswith("VmRSS")).split()[1])
        assert rss_kb > 2 * 16 * 1024  # both buffers resident: the memory worker touches what it holds
    assert stress.running == 0 and all(not os.path.exists(f"/proc/{pid}") or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2] for pid in pids)


@pytest.mark.parametrize("text", ["cpu", "cpu=two", "gpu=1", "cpu=65", "memory=1,memory_mb=5000"])
def test_bad_stress_specs_are_refused(text):
    with pytest.raises(ConfigError, match="--stress"):
        InterferencePlan.parse(text)
