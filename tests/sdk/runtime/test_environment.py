"""Environment capture on a recorded Jetson-shaped /sys tree and on this machine, and requirement checks."""

from __future__ import annotations

import os
import time
from pathlib import Path

from sdk.runtime.environment import LoadMonitor, capture, check_requirements
from sdk.runtime.verdict import FAIL, INCONCLUSIVE, PASS, WARN
from sdk.spec.schema import EnvironmentRequirements


def write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def jetson_tree(root: Path, locked: bool, temperature_mc: int = 48500) -> Path:
    """The files an AGX Orin exposes (names as on L4T 36), with jetson_clocks applied or not."""
    for cpu in range(2):
        base = f"sys/devices/system/cpu/cpu{cpu}"
        write(root, f"{base}/online", "1")
        write(root, f"{base}/cpufreq/scaling_governor", "schedutil")
        write(root, f"{base}/cpufreq/scaling_cur_freq", "2201600")
        write(root, f"{base}/cpufreq/scaling_min_freq", "2201600" if locked else "115200")
        write(root, f"{base}/cpufreq/scaling_max_freq", "2201600")
        write(root, f"{base}/cpufreq/cpuinfo_max_freq", "2201600")
    gpu = "sys/class/devfreq/17000000.ga10b"
    write(root, f"{gpu}/governor", "nvhost_podgov")
    write(root, f"{gpu}/available_frequencies", "306000000 624750000 1300500000")
    write(root, f"{gpu}/cur_freq", "1300500000")
    write(root, f"{gpu}/min_freq", "1300500000" if locked else "306000000")
    write(root, f"{gpu}/max_freq", "1300500000")
    write(root, "sys/class/thermal/thermal_zone0/type", "cpu-thermal")
    write(root, "sys/class/thermal/thermal_zone0/temp", str(temperature_mc))
    write(root, "sys/class/thermal/cooling_device0/type", "pwm-fan")
    write(root, "sys/class/thermal/cooling_device0/cur_state", "3")
    write(root, "proc/loadavg", "0.52 0.40 0.33 1/345 999")
    write(root, "proc/device-tree/model", "NVIDIA Jetson AGX Orin Developer Kit\x00")
    write(root, "etc/nv_tegra_release", "# R36 (release), REVISION: 4.0")
    return root


def fake_nvpmodel(folder: Path, name: str, number: int) -> str:
    script = folder / "nvpmodel"
    script.write_text(f'#!/bin/sh\n[ "$1" = "-q" ] || exit 2\necho "NV Power Mode: {name}"\necho {number}\n')
    script.chmod(0o755)
    return str(script)


def test_capture_reads_a_jetson_tree(tmp_path):
    env = capture(jetson_tree(tmp_path / "locked", locked=True), nvpmodel=fake_nvpmodel(tmp_path, "MAXN", 0))
    assert env["power_mode"] == {"name": "MAXN", "id": "0"}
    assert env["clocks_locked"] is True and env["cpu_governors"] == ["schedutil"]
    assert env["devfreq"]["17000000.ga10b"]["hw_max_hz"] == 1300500000
    assert env["max_temperature_c"] == 48.5 and env["load_1m"] == 0.52
    assert env["model"] == "NVIDIA Jetson AGX Orin Developer Kit" and env["cooling_active"] == {"cooling_device0:pwm-fan": 3}
    unlocked = capture(jetson_tree(tmp_path / "free", locked=False), nvpmodel=None)
    assert unlocked["clocks_locked"] is False and unlocked["power_mode"] is None


def test_capture_on_this_machine_never_guesses():
    env = capture()
    assert env["kernel"] == os.uname().release and env["cpu_count"] == os.cpu_count()
    assert env["power_mode"] is None or "name" in env["power_mode"]  # no nvpmodel off a Jetson
    assert env["clocks_locked"] in (True, False, None)


def test_requirements_pass_fail_warn_and_unreadable(tmp_path):
    maxn = fake_nvpmodel(tmp_path, "MAXN", 0)
    locked = capture(jetson_tree(tmp_path / "a", locked=True), nvpmodel=maxn)
    hot_unlocked = capture(jetson_tree(tmp_path / "b", locked=False, temperature_mc=91000), nvpmodel=maxn)
    required = EnvironmentRequirements(power_mode=0, clocks_locked=True, max_temperature_c=85)
    assert [c.status for c in check_requirements(required, locked, locked)] == [PASS, PASS, PASS]
    # Clocks that fell during the run fail, even if they were locked at the start.
    checks = check_requirements(required, locked, hot_unlocked)
    assert [(c.name, c.status) for c in checks] == [
        ("environment.power_mode", PASS),
        ("environment.clocks_locked", FAIL),
        ("environment.max_temperature_c", FAIL),
    ]
    warn_only = required.model_copy(update={"on_unmet": "warn"})
    assert {c.status for c in check_requirements(warn_only, locked, hot_unlocked)} == {PASS, WARN}
    laptop = capture(tmp_path / "empty", nvpmodel=None)
    checks = check_requirements(EnvironmentRequirements(power_mode="MAXN"), laptop, laptop)
    assert checks[0].status == INCONCLUSIVE and "could not be read" in checks[0].detail
    assert checks[0].unverified and not check_requirements(required, locked, locked)[0].unverified
    warn = check_requirements(EnvironmentRequirements(power_mode="MAXN", on_unmet="warn"), laptop, laptop)[0]
    assert warn.status == WARN and warn.unverified and warn.measured is None


def test_a_busy_machine_makes_the_measurement_inconclusive(tmp_path):
    quiet = capture(jetson_tree(tmp_path / "a", locked=True), nvpmodel=None)  # load 0.52 before and after
    during = {"load_1m": {"max": 3.9, "mean": 3.1}}
    required = EnvironmentRequirements(max_load=2.0)
    (calm,) = check_requirements(required, quiet, quiet, {"load_1m": {"max": 1.2, "mean": 1.0}})
    assert (calm.status, calm.measured) == (PASS, 1.2)
    (busy,) = check_requirements(required, quiet, quiet, during)
    assert (busy.name, busy.status, busy.measured) == ("environment.max_load", INCONCLUSIVE, 3.9) and "not quiet" in busy.detail
    (warned,) = check_requirements(required.model_copy(update={"on_unmet": "warn"}), quiet, quiet, during)
    assert warned.status == WARN and not warned.unverified
    laptop = capture(tmp_path / "empty", nvpmodel=None)  # no /proc/loadavg: unverified, never a pass
    (unread,) = check_requirements(required, laptop, laptop, None)
    assert unread.status == INCONCLUSIVE and unread.unverified


def test_load_monitor_samples_load_and_frequency(tmp_path):
    root = jetson_tree(tmp_path / "t", locked=True)  # 2 CPUs at 2201.6 MHz, load 0.52
    write(root, "proc/stat", "cpu  100 0 100 700 100 0 0 0 0 0\ncpu0 50 0 50 350 50 0 0 0 0 0")
    monitor = LoadMonitor(interval_s=0.01, root=root)
    with monitor:
        write(root, "proc/loadavg", "2.75 0.40 0.33 3/345 999")
        write(root, "proc/stat", "cpu  400 0 200 800 100 0 0 0 0 0")
        time.sleep(0.1)
    summary = monitor.summary()
    assert summary["load_1m"]["max"] == 2.75 and summary["samples"] >= 3
    assert summary["cpu_mhz"] == {"min": 2201.6, "mean": 2201.6, "max": 2201.6}
    assert summary["cpu_busy_percent"] == 80.0  # 400 busy of 500 jiffies between the first and last sample
    assert summary["overloaded"] is (os.cpu_count() < 2.75)
    with LoadMonitor(interval_s=0.05) as here:  # this machine: whatever it tells, never a guess
        time.sleep(0.12)
    assert here.summary()["cpus"] == os.cpu_count() and here.summary()["seconds"] > 0.1
