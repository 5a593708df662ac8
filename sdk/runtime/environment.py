"""What the device was set to while it measured: power mode, clocks, governors, temperatures, load.

Latency on a Jetson depends on nvpmodel's power mode, on whether jetson_clocks pinned the clocks,
on temperature (throttling) and on what else runs. Every report records these so a reviewer can
tell a measurement from an accident, and the pipeline can require them (`budgets.environment`).
Only the standard library and plain files of /sys and /proc are read (everything readable
without root, except debugfs's EMC/DLA clocks, which need it); `root` lets tests point the same
code at a recorded tree. What cannot be read is None, never guessed.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
from pathlib import Path

from sdk.runtime.verdict import FAIL, INCONCLUSIVE, PASS, WARN, BudgetCheck
from sdk.spec.schema import EnvironmentRequirements

# debugfs clocks of the Jetson's BPMP (root only): rate, max_rate and whether the rate is locked.
BPMP_CLOCKS = ("emc", "nafll_dla0", "nafll_dla1")


def _read(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace").strip("\x00\n ")
    except OSError:
        return None


def _read_int(path: Path) -> int | None:
    text = _read(path)
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _cpus(root: Path) -> list[dict]:
    cpus = []
    base = root / "sys/devices/system/cpu"
    for folder in sorted(base.glob("cpu[0-9]*"), key=lambda p: int(p.name[3:])):
        freq = folder / "cpufreq"
        online = _read(folder / "online")
        cpus.append(
            {
                "cpu": int(folder.name[3:]),
                "online": online != "0",
                "governor": _read(freq / "scaling_governor"),
                "cur_khz": _read_int(freq / "scaling_cur_freq"),
                "min_khz": _read_int(freq / "scaling_min_freq"),
                "max_khz": _read_int(freq / "scaling_max_freq"),
                "hw_max_khz": _read_int(freq / "cpuinfo_max_freq"),
            }
        )
    return cpus


def _devfreq(root: Path) -> dict[str, dict]:
    """Device frequency scaling (the Jetson GPU is a devfreq device, e.g. 17000000.ga10b)."""
    found = {}
    for folder in sorted((root / "sys/class/devfreq").glob("*")):
        available = (_read(folder / "available_frequencies") or "").split()
        found[folder.name] = {
            "governor": _read(folder / "governor"),
            "cur_hz": _read_int(folder / "cur_freq"),
            "min_hz": _read_int(folder / "min_freq"),
            "max_hz": _read_int(folder / "max_freq"),
            "hw_max_hz": max((int(f) for f in available if f.isdigit()), default=None),
        }
    return found


def _bpmp_clocks(root: Path) -> dict[str, dict]:
    found = {}
    for name in BPMP_CLOCKS:
        folder = root / "sys/kernel/debug/bpmp/debug/clk" / name
        rate = _read_int(folder / "rate")
        if rate is not None:
            found[name] = {"rate_hz": rate, "max_hz": _read_int(folder / "max_rate"), "locked": _read(folder / "mrq_rate_locked") == "1"}
    return found


def _thermal(root: Path) -> tuple[dict[str, float], dict[str, int]]:
    temperatures = {}
    for zone in sorted((root / "sys/class/thermal").glob("thermal_zone*")):
        millic = _read_int(zone / "temp")
        if millic is not None:
            temperatures[_read(zone / "type") or zone.name] = round(millic / 1000, 1)
    cooling = {}
    for device in sorted((root / "sys/class/thermal").glob("cooling_device*")):
        state = _read_int(device / "cur_state")
        if state is not None:
            cooling[f"{device.name}:{_read(device / 'type')}"] = state
    return temperatures, cooling


def _power_mode(nvpmodel: str | None) -> dict | None:
    """`nvpmodel -q` prints "NV Power Mode: MAXN" then the mode number."""
    if nvpmodel is None:
        return None
    try:
        out = subprocess.run([nvpmodel, "-q"], capture_output=True, text=True, timeout=5).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    name = re.search(r"NV Power Mode:\s*(\S+)", out)
    number = re.search(r"^\s*(\d+)\s*$", out, re.MULTILINE)
    if name is None:
        return None
    return {"name": name.group(1), "id": number.group(1) if number else None}


def capture(root: Path = Path("/"), nvpmodel: str | None = "auto") -> dict:
    """The environment as one JSON-ready dict; cheap enough (a few ms) to run before and after every run."""
    if nvpmodel == "auto":
        nvpmodel = shutil.which("nvpmodel")
    temperatures, cooling = _thermal(root)
    load = (_read(root / "proc/loadavg") or "").split()
    cpus = _cpus(root)
    devfreq = _devfreq(root)
    bpmp = _bpmp_clocks(root)
    return {
        "kernel": _read(root / "proc/sys/kernel/osrelease") or platform.release(),
        "machine": platform.machine(),
        "model": _read(root / "proc/device-tree/model"),
        "l4t": _read(root / "etc/nv_tegra_release"),
        "load_1m": float(load[0]) if load else None,
        "cpus": cpus,
        "cpu_governors": sorted({c["governor"] for c in cpus if c["online"] and c["governor"]}),
        "devfreq": devfreq,
        "bpmp_clocks": bpmp,
        "power_mode": _power_mode(nvpmodel),
        "clocks_locked": clocks_locked(cpus, devfreq, bpmp),
        "temperatures_c": temperatures,
        "max_temperature_c": max(temperatures.values(), default=None),
        "cooling_active": {name: state for name, state in cooling.items() if state > 0},
        "cpu_count": os.cpu_count(),
    }


def clocks_locked(cpus: list[dict], devfreq: dict[str, dict], bpmp: dict[str, dict]) -> bool | None:
    """What jetson_clocks does: every online CPU and devfreq device with min == max == its hardware maximum
    (and BPMP's EMC locked, where debugfs is readable). None when there is nothing to tell from."""
    verdicts = []
    for cpu in cpus:
        if cpu["online"] and cpu["min_khz"] is not None and cpu["hw_max_khz"] is not None:
            verdicts.append(cpu["min_khz"] == cpu["max_khz"] == cpu["hw_max_khz"])
    for device in devfreq.values():
        if device["min_hz"] is not None and device["hw_max_hz"] is not None:
            verdicts.append(device["min_hz"] == device["max_hz"] == device["hw_max_hz"])
    if "emc" in bpmp:
        verdicts.append(bpmp["emc"]["locked"])
    return all(verdicts) if verdicts else None


def check_requirements(required: EnvironmentRequirements | None, before: dict, after: dict) -> list[BudgetCheck]:
    """One check per requirement, on the environment before AND after the run (clocks can fall mid-run)."""
    if required is None:
        return []
    unmet_status = FAIL if required.on_unmet == "fail" else WARN
    checks = []

    def add(name: str, wanted, measured, ok: bool | None, detail: str) -> None:
        if ok is None:  # cannot be read here: never a PASS, but a warn-only requirement stays a warning
            status = INCONCLUSIVE if required.on_unmet == "fail" else WARN
            detail = f"could not be read on this device ({detail})"
        else:
            status = PASS if ok else unmet_status
        checks.append(BudgetCheck(f"environment.{name}", wanted, measured, status, 0, None, detail))

    if required.power_mode is not None:
        modes = [env["power_mode"] for env in (before, after)]
        if any(mode is None for mode in modes):
            add("power_mode", required.power_mode, None, None, "nvpmodel -q")
        else:
            ok = all(required.power_mode in (mode["name"], mode["id"]) for mode in modes)
            add("power_mode", required.power_mode, modes[-1]["name"], ok, f"nvpmodel before: {modes[0]['name']}, after: {modes[1]['name']}")
    if required.clocks_locked:
        states = [env["clocks_locked"] for env in (before, after)]
        ok = None if None in states else all(states)
        add("clocks_locked", "true", str(states[-1]).lower(), ok, "CPU/GPU/EMC min == max == hardware maximum, before and after")
    if required.cpu_governor is not None:
        governors = sorted(set(before["cpu_governors"]) | set(after["cpu_governors"]))
        ok = (governors == [required.cpu_governor]) if governors else None
        add("cpu_governor", required.cpu_governor, ",".join(governors) or None, ok, "scaling_governor of every online CPU")
    if required.max_temperature_c is not None:
        temps = [env["max_temperature_c"] for env in (before, after) if env["max_temperature_c"] is not None]
        ok = (max(temps) <= required.max_temperature_c) if temps else None
        add("max_temperature_c", required.max_temperature_c, max(temps) if temps else None, ok, "hottest thermal zone, before and after")
    return checks
