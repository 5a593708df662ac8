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
import threading
import time
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


def check_requirements(required: EnvironmentRequirements | None, before: dict, after: dict, during: dict | None = None) -> list[BudgetCheck]:
    """One check per requirement, on the environment before AND after the run (clocks can fall mid-run);
    `max_load` also on the load sampled during it (LoadMonitor)."""
    if required is None:
        return []
    warn_only = required.on_unmet == "warn"
    checks = []

    def add(name: str, wanted, measured, ok: bool | None, detail: str, unmet: str = FAIL) -> None:
        if ok is None:  # cannot be read here: never a PASS; unverified, a failure unless the file only warns
            status = WARN if warn_only else INCONCLUSIVE
            detail = f"could not be read on this device ({detail})"
            checks.append(BudgetCheck(f"environment.{name}", wanted, measured, status, 0, None, detail, unverified=True))
            return
        status = PASS if ok else WARN if warn_only else unmet
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
        measured = None if ok is None else str(states[-1]).lower()
        add("clocks_locked", "true", measured, ok, "CPU/GPU/EMC min == max == hardware maximum, before and after")
    if required.cpu_governor is not None:
        governors = sorted(set(before["cpu_governors"]) | set(after["cpu_governors"]))
        ok = (governors == [required.cpu_governor]) if governors else None
        add("cpu_governor", required.cpu_governor, ",".join(governors) or None, ok, "scaling_governor of every online CPU")
    if required.max_temperature_c is not None:
        temps = [env["max_temperature_c"] for env in (before, after) if env["max_temperature_c"] is not None]
        ok = (max(temps) <= required.max_temperature_c) if temps else None
        add("max_temperature_c", required.max_temperature_c, max(temps) if temps else None, ok, "hottest thermal zone, before and after")
    if required.max_load is not None:
        loads = [env.get("load_1m") for env in (before, after)] + [((during or {}).get("load_1m") or {}).get("max")]
        loads = [load for load in loads if load is not None]
        peak = max(loads) if loads else None
        ok = (peak <= required.max_load) if loads else None
        detail = "highest 1-minute load average before, during and after the run (the run's own threads count)"
        if ok is False:
            detail += "; the machine was not quiet: run again on a quiet one"
        # A busy machine makes the latencies say nothing about the pipeline: INCONCLUSIVE, not FAIL.
        add("max_load", required.max_load, peak, ok, detail, unmet=INCONCLUSIVE)
    return checks


def _cpu_jiffies(root: Path) -> tuple[int, int] | None:
    """(busy, total) jiffies of all CPUs from /proc/stat."""
    line = (_read(root / "proc/stat") or "").split("\n", 1)[0].split()
    if not line or line[0] != "cpu":
        return None
    values = [int(v) for v in line[1:] if v.isdigit()]
    idle = sum(values[3:5])  # idle + iowait
    return sum(values) - idle, sum(values)


def _cpu_mhz(root: Path) -> list[float]:
    """Current frequency of each online CPU: cpufreq where the kernel has it, else /proc/cpuinfo's "cpu MHz"."""
    found = []
    for folder in sorted((root / "sys/devices/system/cpu").glob("cpu[0-9]*")):
        khz = _read_int(folder / "cpufreq/scaling_cur_freq")
        if khz is not None and _read(folder / "online") != "0":
            found.append(khz / 1000)
    if found:
        return found
    for line in (_read(root / "proc/cpuinfo") or "").splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "cpu MHz":
            try:
                found.append(float(value))
            except ValueError:
                pass
    return found


class LoadMonitor:
    """CPU load and frequency while the pipeline runs, sampled by a thread every `interval_s` (and at start
    and stop), so a report tells a measurement on a quiet machine from one on a busy one. A sample reads
    three small files: far below the noise it looks for."""

    def __init__(self, interval_s: float = 1.0, root: Path = Path("/")) -> None:
        self.interval_s = interval_s
        self.root = root
        self._loads: list[float] = []
        self._mhz: list[float] = []
        self._jiffies: list[tuple[int, int]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = 0.0
        self._seconds = 0.0

    def _sample(self) -> None:
        load = (_read(self.root / "proc/loadavg") or "").split()
        if load:
            self._loads.append(float(load[0]))
        mhz = _cpu_mhz(self.root)
        if mhz:
            self._mhz.append(sum(mhz) / len(mhz))
        jiffies = _cpu_jiffies(self.root)
        if jiffies is not None:
            self._jiffies.append(jiffies)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def __enter__(self) -> LoadMonitor:
        self._started = time.monotonic()
        self._sample()
        self._thread = threading.Thread(target=self._loop, name="load-monitor", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._sample()
        self._seconds = time.monotonic() - self._started

    def summary(self) -> dict:
        """JSON-ready: load (max, mean), CPU busy %, mean CPU MHz (min, mean, max), and whether the load
        exceeded the core count. None where the machine does not tell."""
        cpus = os.cpu_count()
        busy = None
        if len(self._jiffies) >= 2:
            (b0, t0), (b1, t1) = self._jiffies[0], self._jiffies[-1]
            busy = round(100 * (b1 - b0) / (t1 - t0), 1) if t1 > t0 else None
        loads, mhz = self._loads, self._mhz
        peak = max(loads) if loads else None
        return {
            "seconds": round(self._seconds, 3),
            "samples": max(len(loads), len(mhz)),
            "interval_s": self.interval_s,
            "cpus": cpus,
            "load_1m": {"max": peak, "mean": round(sum(loads) / len(loads), 2)} if loads else None,
            "cpu_busy_percent": busy,
            "cpu_mhz": {"min": round(min(mhz), 1), "mean": round(sum(mhz) / len(mhz), 1), "max": round(max(mhz), 1)} if mhz else None,
            "overloaded": (peak > cpus) if peak is not None and cpus else None,
        }
