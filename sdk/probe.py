"""The device fingerprint, gathered on the device in one round trip (standard library only).

The host sends this file to the device's `python3 -` and reads one JSON object back, so it
must run before any release exists there. Every field is `null` where the device does not
have it: a laptop has no L4T, a Thor has no DLA.
"""

from __future__ import annotations

import glob
import json
import os
import platform
import re
import shutil
import subprocess
import sys

# What the runtime imports, and the distribution that provides it where the device lacks it. The minimums are
# what JetPack 6 ships (Ubuntu 22.04: numpy 1.21.5, PyYAML 5.4.1; OpenCV 4.8.0) wherever the code allows
# (decision 0430); pyproject.toml's runtime dependencies say the same (a test holds them equal).
RUNTIME_MODULES = {
    "numpy": "numpy>=1.21.5",
    "cv2": "opencv-python-headless>=4.8",
    "yaml": "pyyaml>=5.4.1",
    "pydantic": "pydantic>=2.5",
    "onnxruntime": "onnxruntime>=1.17",
    # The TensorRT backend and sdk/gpu; tools/release/wheels.py pins it to the device's CUDA major.
    "cuda.bindings": "cuda-bindings",
}
# Modules only some pipelines need: the probe reports them missing like the others, and a deploy ships them
# only to run a pipeline that uses them (tools/release/wheels.py, pipeline_modules).
PIPELINE_MODULES = {
    "scipy": "scipy>=1.10",  # the `track:` stage (sdk/track): linear_sum_assignment
    # Recorded drives (decision 1020): mcap:// sources and the mcap sink read and write MCAP; ROS 2 messages in it
    "mcap": "mcap>=1.1",
    "mcap_ros2": "mcap-ros2-support>=0.5",
    "rosbags": "rosbags>=0.10",  # rosbag2:// sources (SQLite3 or MCAP storage), no ROS installation needed
    "foxglove": "foxglove-sdk>=0.30",  # the mcap sink's foxglove.ImageAnnotations (its schemas, its MCAP writer)
}

# The distributions that may provide each module, in the order asked (pip's names; a vendor's own build of
# OpenCV, as JetPack's, has no distribution metadata: its cv2/version.py says the version).
DISTRIBUTIONS = {
    "numpy": ("numpy",),
    "cv2": ("opencv-python-headless", "opencv-python", "opencv-contrib-python-headless", "opencv-contrib-python"),
    "yaml": ("PyYAML",),
    "pydantic": ("pydantic",),
    "onnxruntime": ("onnxruntime", "onnxruntime-gpu"),
    "cuda.bindings": ("cuda-bindings", "cuda-python"),
    "scipy": ("scipy",),
    "mcap": ("mcap",),
    "mcap_ros2": ("mcap-ros2-support",),
    "rosbags": ("rosbags",),
    "foxglove": ("foxglove-sdk",),
}

# Compute capability by Tegra SoC (from /proc/device-tree/compatible).
TEGRA_COMPUTE = {"tegra234": "8.7", "tegra264": "11.0", "tegra194": "7.2"}
# DLA cores where every module of the SoC has the same count. tegra234 (Orin) is not one of them: AGX Orin and
# Orin NX 16GB have 2, Orin NX 8GB 1, Orin Nano 0 (its NVDLA is fused off), so its count comes from the module.
TEGRA_DLA_CORES = {"tegra194": 2, "tegra264": 0}
# Jetson modules by the part number L4T writes into /proc/device-tree/compatible ("nvidia,p3767-0005", after the
# carrier board's "nvidia,p3768-0000+p3767-0005"): (platform, name, DLA cores). Part numbers: Jetson Linux Developer
# Guide, "Jetson Module Adaptation and Bring-Up" (P3701 AGX Orin, P3767 Orin NX and Orin Nano); DLA cores: the Jetson
# AGX Orin and Orin NX / Nano data sheets.
JETSON_MODULES = {
    "p3701-0000": ("jetson-agx-orin", "Jetson AGX Orin (developer kit module)", 2),
    "p3701-0004": ("jetson-agx-orin", "Jetson AGX Orin 32GB", 2),
    "p3701-0005": ("jetson-agx-orin", "Jetson AGX Orin 64GB", 2),
    "p3701-0008": ("jetson-agx-orin", "Jetson AGX Orin Industrial", 2),
    "p3767-0000": ("jetson-orin-nx", "Jetson Orin NX 16GB", 2),
    "p3767-0001": ("jetson-orin-nx", "Jetson Orin NX 8GB", 1),
    "p3767-0003": ("jetson-orin-nano", "Jetson Orin Nano 8GB", 0),
    "p3767-0004": ("jetson-orin-nano", "Jetson Orin Nano 4GB", 0),
    "p3767-0005": ("jetson-orin-nano", "Jetson Orin Nano 8GB (developer kit)", 0),
}
# Where the part number is not in the table (a newer module), the device tree's model names the family.
MODEL_FAMILIES = (("Orin Nano", "jetson-orin-nano", 0), ("Orin NX", "jetson-orin-nx", None), ("AGX Orin", "jetson-agx-orin", 2))


def python_abi() -> str:
    """This Python's ABI tag as wheels name it (`cp310`): what a device's probe reports and the host compares with."""
    return f"cp{sys.version_info.major}{sys.version_info.minor}"


def _read(path: str) -> str | None:
    try:
        with open(path, "rb") as handle:
            return handle.read().decode("utf-8", "replace").replace("\x00", "\n").strip()
    except OSError:
        return None


def _run(*argv: str, timeout: float = 5.0) -> str | None:
    if shutil.which(argv[0]) is None:
        return None
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def _os_release() -> str | None:
    text = _read("/etc/os-release") or ""
    match = re.search(r'^PRETTY_NAME="?([^"\n]*)"?', text, re.M)
    return match.group(1) if match else None


def _l4t() -> str | None:
    text = _read("/etc/nv_tegra_release")  # "# R36 (release), REVISION: 4.0, ..."
    match = re.search(r"R(\d+) \(release\), REVISION: ([\d.]+)", text or "")
    return f"{match.group(1)}.{match.group(2)}" if match else None


DPKG_PACKAGES = ("nvidia-jetpack", "libnvinfer10", "libnvinfer8")
_DPKG: dict[str, str] = {}


def _dpkg_version(package: str) -> str | None:
    """The installed version of a Debian package; the probe's packages are asked in one `dpkg-query` (a process
    start costs tens of milliseconds on a small core, and every deploy probes)."""
    if not _DPKG and shutil.which("dpkg-query") is not None:
        try:  # exits 1 when any package is unknown, and still lists the others
            done = subprocess.run(
                ["dpkg-query", "-W", "-f=${Package} ${Status} ${Version}\n", *DPKG_PACKAGES], capture_output=True, text=True, timeout=5.0
            )
        except (OSError, subprocess.SubprocessError):
            done = None
        for line in done.stdout.splitlines() if done else ():
            name, *status, version = line.split(" ")
            if "installed" in status and version:
                _DPKG[name.split(":")[0]] = version
        _DPKG.setdefault("", "")  # asked once per process
    return _DPKG.get(package) or None


def _tensorrt() -> str | None:
    import importlib.util

    for module in ("tensorrt", "tensorrt_lean"):
        try:
            if importlib.util.find_spec(module) is None:
                continue  # not there: no import attempt (each costs a search of the whole path)
            return __import__(module).__version__
        except Exception:  # noqa: BLE001 - any failure means "not usable here"
            continue
    return _dpkg_version("libnvinfer10") or _dpkg_version("libnvinfer8")


def _cuda_driver() -> str | None:
    """The CUDA version the installed driver supports (what a release can run with), or None without a driver.

    `cuDriverGetVersion` from libcuda needs no GPU context; nvidia-smi's header is the fallback."""
    import ctypes

    for name in ("libcuda.so.1", "libcuda.so"):
        try:
            library = ctypes.CDLL(name)
        except OSError:
            continue
        version = ctypes.c_int(0)
        try:
            if library.cuDriverGetVersion(ctypes.byref(version)) == 0 and version.value > 0:
                return f"{version.value // 1000}.{version.value % 1000 // 10}"
        except (AttributeError, OSError):
            pass
        break
    match = re.search(r"CUDA Version:\s*([\d.]+)", _run("nvidia-smi") or "")
    return match.group(1) if match else None


def _cuda_toolkit() -> str | None:
    """The CUDA toolkit's version (nvcc, headers): a build tool, present or not independently of a driver."""
    text = _read("/usr/local/cuda/version.json")
    if text:
        match = re.search(r'"cuda"\s*:\s*\{[^}]*"version"\s*:\s*"([\d.]+)"', text)
        if match:
            return match.group(1)
    output = _run("nvcc", "--version") or ""
    match = re.search(r"release ([\d.]+)", output)
    return match.group(1) if match else None


def _soc() -> str | None:
    compatible = _read("/proc/device-tree/compatible") or ""
    for soc in TEGRA_COMPUTE:
        if soc in compatible:
            return soc
    return None


def _compute_capability(soc: str | None) -> str | None:
    if soc is not None:
        return TEGRA_COMPUTE[soc]
    output = _run("nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader")
    return output.splitlines()[0].strip() if output else None


def _module() -> dict | None:
    """The Jetson module, from the part number in /proc/device-tree/compatible, else the family named by
    /proc/device-tree/model: {"part", "name", "platform", "dla_cores"} (None where unknown), or None off a Jetson."""
    compatible = _read("/proc/device-tree/compatible") or ""
    for part in re.findall(r"\bp\d{4}-\d{4}\b", compatible):
        if part in JETSON_MODULES:
            platform_name, name, cores = JETSON_MODULES[part]
            return {"part": part, "name": name, "platform": platform_name, "dla_cores": cores}
    model = _read("/proc/device-tree/model") or ""
    for words, platform_name, cores in MODEL_FAMILIES:
        if words in model:
            parts = re.findall(r"\bp\d{4}-\d{4}\b", compatible)
            return {"part": parts[-1] if parts else None, "name": model.strip(), "platform": platform_name, "dla_cores": cores}
    return None


def _dla_cores(soc: str | None, dev: str = "/dev", module: dict | None = None) -> int | None:
    """L4T gives each DLA core two nodes, nvhost-nvdla<N> and nvhost-ctrl-nvdla<N> (JetPack 6 may show only
    the ctrl one): count the distinct core numbers, not the nodes. Without nodes, the module's count (an Orin Nano
    has none), else the SoC's where all its modules agree; an Orin of unknown module is unknown (null), never
    guessed: the target's platform then decides."""
    cores = {match.group(1) for path in glob.glob(os.path.join(dev, "nvhost-*nvdla*")) if (match := re.search(r"nvdla(\d+)$", path))}
    if cores:
        return len(cores)
    if module is not None and module.get("dla_cores") is not None:
        return module["dla_cores"]
    return TEGRA_DLA_CORES.get(soc) if soc else None


def _power_mode() -> str | None:
    output = _run("nvpmodel", "-q") or ""
    match = re.search(r"NV Power Mode:\s*(\S+)", output)
    return match.group(1) if match else None


CLOCK_FILES = (("gpu", "/sys/devices/platform/*gpu*/devfreq/*/cur_freq"), ("emc", "/sys/kernel/debug/bpmp/debug/clk/emc/rate"))


def _clocks() -> dict | None:
    clocks = {}
    for name, pattern in CLOCK_FILES:
        for path in glob.glob(pattern):
            value = _read(path)
            if value and value.isdigit():
                clocks[f"{name}_hz"] = int(value)
                break
    cpu = _read("/sys/devices/system/cpu/cpu0/cpufreq/scaling_cur_freq")
    if cpu and cpu.isdigit():
        clocks["cpu0_hz"] = int(cpu) * 1000
    governor = _read("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor")
    if governor:
        clocks["cpu_governor"] = governor
    return clocks or None


def _missing_modules() -> list[str]:
    """Runtime modules this Python cannot find. Found-but-broken ones (a missing shared library)
    are left to the health check, which runs the release before it is committed."""
    import importlib.util

    def found(module: str) -> bool:
        try:
            return importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:  # the parent of a dotted name (`cuda` of cuda.bindings) is missing
            return False

    return [module for module in (*RUNTIME_MODULES, *PIPELINE_MODULES) if not found(module)]


def _module_version(module: str) -> str | None:
    """The version of the copy of `module` this Python imports, without importing it where metadata says it
    (importing OpenCV and ONNX Runtime costs seconds on a small ARM core)."""
    import importlib.metadata
    import importlib.util

    try:
        spec = importlib.util.find_spec(module)
    except (ModuleNotFoundError, ValueError):
        return None
    if spec is None:
        return None
    folder = os.path.dirname(spec.origin) if spec.origin else (list(spec.submodule_search_locations or []) or [None])[0]
    for distribution in DISTRIBUTIONS.get(module, ()):
        # The metadata must belong to the copy that is imported (a venv's numpy over the system's, stale metadata).
        for found in importlib.metadata.distributions(name=distribution):
            site = os.path.abspath(str(found.locate_file("")))
            if folder is None or os.path.abspath(folder).startswith(site + os.sep):
                return found.version
    if folder:  # OpenCV's own installation (JetPack's, a source build) writes cv2/version.py
        match = re.search(r'opencv_version\s*=\s*"([^"]+)"', _read(os.path.join(folder, "version.py")) or "")
        if match:
            return match.group(1)
    try:
        return str(getattr(__import__(module, fromlist=["__version__"]), "__version__", None) or "") or None
    except Exception:  # noqa: BLE001 - found but broken: the health check names the cause
        return None


def _module_versions() -> dict[str, str | None]:
    """The installed version of every runtime module, null where absent (or present without a readable version)."""
    return {module: _module_version(module) for module in RUNTIME_MODULES}


def fingerprint(root: str | None = None) -> dict:
    soc = _soc()
    disk_path = root if root and os.path.isdir(root) else os.path.dirname(root) if root else "/"
    try:
        usage = shutil.disk_usage(disk_path or "/")
        free = usage.free
    except OSError:
        free = None
    jetpack = _dpkg_version("nvidia-jetpack")
    module = _module() if soc else None
    return {
        "arch": platform.machine(),
        "os": _os_release(),
        "kernel": platform.release(),
        "l4t": _l4t(),
        "jetpack": jetpack.split("-")[0] if jetpack else None,
        "soc": soc,
        "python": platform.python_version(),
        "python_executable": sys.executable,
        "tensorrt": _tensorrt(),
        "cuda": _cuda_driver(),  # null without a CUDA driver, whatever toolkit is installed
        "cuda_toolkit": _cuda_toolkit(),
        "compute_capability": _compute_capability(soc),
        "dla_cores": _dla_cores(soc, module=module),
        "module": module,  # the Jetson module (part number, name, platform); engines are cached per module
        "power_mode": _power_mode(),
        "clocks": _clocks(),
        "cpus": os.cpu_count(),
        "free_disk_bytes": free,
        "systemd": os.path.isdir("/run/systemd/system"),
        "python_abi": python_abi(),
        "missing_modules": _missing_modules(),
        "module_versions": _module_versions(),
    }


if __name__ == "__main__":
    print(json.dumps(fingerprint(sys.argv[1] if len(sys.argv) > 1 else None), sort_keys=True))
