"""Wheels for what the device's Python lacks, for the device's architecture and Python, fetched on the host.

Vehicles are often offline: the host (which reaches PyPI) downloads binary wheels with pip for
the target platform, they travel in the release (`wheels/`), and the device installs them into
a per-release environment without any network (`python -m sdk store env`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from sdk.errors import ReleaseError
from sdk.probe import DISTRIBUTIONS, PIPELINE_MODULES, RUNTIME_MODULES
from sdk.spec.schema import Pipeline

# What a JetPack / DRIVE OS device has and must keep: its OpenCV, TensorRT and cuda-python are built against its
# numpy, and the vendor's OpenCV has GStreamer/Argus. A release never ships its own copy of these where the device
# has one; everything it ships is resolved against them (decision 0430).
DEVICE_OWNED = ("numpy", "cv2", "cuda.bindings")

# manylinux tags a glibc-2.35 device (JetPack 6, Ubuntu 22.04) and current x86-64 Linux accept.
GLIBC_TAGS = (
    "manylinux2014",
    "manylinux_2_17",
    "manylinux_2_24",
    "manylinux_2_27",
    "manylinux_2_28",
    "manylinux_2_31",
    "manylinux_2_34",
    "manylinux_2_35",
)


def cuda_bindings_requirement(cuda: str | None) -> str | None:
    """cuda-bindings of the device's CUDA major, or None without CUDA (nothing to drive).

    cuda-bindings 13.x needs a CUDA 13 driver (580.65 or later) (cuda-bindings 12.9 and 13.x installation pages), so
    JetPack 6 (CUDA 12.6) needs `<13`: unbounded, pip picks 13.x and it fails. Within the major no tighter pin exists:
    cuda-bindings 12.x starts at 12.8, newer than JetPack 6's CUDA 12.2 / 12.6. That is safe because the SDK uses only
    the driver module (`cuda.bindings.driver`, entry points resolved from the installed driver) and NVRTC (checked
    against the driver, sdk/gpu/binaries.py), never the runtime module, which refuses a driver older than its own
    CUDA (cudaErrorInsufficientDriver, 35) (decision 0412)."""
    if not cuda:
        return None
    try:
        major = int(str(cuda).split(".")[0])
    except ValueError:
        raise ReleaseError(f"the device reports CUDA {cuda!r}, not a version like 12.6") from None
    return f"cuda-bindings>={major},<{major + 1}"


def pipeline_modules(spec: Pipeline, live_view: int | None = None) -> tuple[str, ...]:
    """The modules of sdk.probe.PIPELINE_MODULES this pipeline runs: scipy where it tracks (`track:`), mcap and
    mcap_ros2 for an mcap:// source, rosbags for a rosbag2:// one, mcap and foxglove for an mcap sink (mcap_ros2 for its
    `messages: vision_msgs`), foxglove for a foxglove sink or for the live view a deploy serves (`live_view`: its port,
    `deploy --live-view`; None: none)."""
    needs = ["scipy"] if spec.track is not None else []
    schemes = {camera.uri.partition("://")[0] for camera in spec.cameras.values()}
    if "mcap" in schemes:
        needs += ["mcap", "mcap_ros2"]
    if "rosbag2" in schemes:
        needs += ["rosbags"]
    for sink in spec.sinks:
        if sink.kind == "mcap":  # the ROS 2 flavour (messages: vision_msgs) writes with mcap-ros2-support
            needs += ["mcap", "mcap_ros2" if sink.messages == "vision_msgs" else "foxglove"]
    if live_view is not None or any(sink.kind == "foxglove" for sink in spec.sinks):
        needs += ["foxglove"]
    return tuple(dict.fromkeys(needs))


def requirements_for(missing_modules: list[str], cuda: str | None = None, needs: tuple[str, ...] = ()) -> list[str]:
    """What pip fetches for the modules the device lacks; `cuda` (the probe's, e.g. 12.6) pins cuda-bindings,
    which is left out where the device has no CUDA. A missing module of sdk.probe.PIPELINE_MODULES is fetched only
    where the pipeline `needs` it (pipeline_modules): scipy travels with a tracking pipeline, not with every release."""
    known = {**RUNTIME_MODULES, **PIPELINE_MODULES}
    unknown = [m for m in missing_modules if m not in known]
    if unknown:
        raise ReleaseError(f"the device lacks modules the SDK does not know how to ship: {', '.join(unknown)}")
    pinned = {"cuda.bindings": cuda_bindings_requirement(cuda)}
    wanted = [m for m in missing_modules if m in RUNTIME_MODULES or m in needs]
    requirements = [pinned[m] if m in pinned else known[m] for m in wanted]
    return sorted(r for r in requirements if r)


@dataclass(frozen=True)
class WheelPlan:
    """What the offline wheels must hold for one device.

    requirements: what pip fetches (modules the device lacks, or has below the runtime's minimum).
    constraints: the device's own packages pinned to the versions it has (`numpy==1.21.5`): whatever is fetched must
    work with them, so pip picks an ONNX Runtime built for the device's numpy rather than pulling numpy 2.
    keep: distributions the device has and keeps; their wheels (pulled in as dependencies) are never shipped."""

    requirements: list[str]
    constraints: list[str]
    keep: list[str]


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _satisfies(requirement: str, version: str) -> bool:
    from packaging.requirements import Requirement
    from packaging.version import InvalidVersion

    try:
        return Requirement(requirement).specifier.contains(version, prereleases=True)
    except InvalidVersion:
        return True  # a vendor's version string pip cannot read (e.g. "4.8.0-dev"): trust what the device has


def plan_wheels(facts: dict, *, onnxruntime: bool = True, needs: tuple[str, ...] = ()) -> WheelPlan:
    """The wheel plan for a probed device. `onnxruntime=False` where the release runs on TensorRT (an engine and a
    CUDA device): ONNX Runtime, and the numpy it would pull, are not shipped at all. `needs`: the modules of
    sdk.probe.PIPELINE_MODULES this pipeline uses (pipeline_modules: scipy with `track:`), shipped only then.

    A module the device has at a version below the runtime's minimum is shipped (it shadows the device's copy in
    the release's own environment only), except the device-owned ones: replacing those would break the device's
    OpenCV and TensorRT, so the deploy stops with the version found and the minimum."""
    missing = set(facts.get("missing_modules") or [])
    unknown = sorted(missing - set(RUNTIME_MODULES) - set(PIPELINE_MODULES))
    if unknown:
        raise ReleaseError(f"the device lacks modules the SDK does not know how to ship: {', '.join(unknown)}")
    versions = facts.get("module_versions") or {}
    requirements, constraints, keep = [], [], []
    wanted = {**RUNTIME_MODULES, **{module: PIPELINE_MODULES[module] for module in needs if module in PIPELINE_MODULES}}
    for module, default in wanted.items():
        requirement = cuda_bindings_requirement(facts.get("cuda")) if module == "cuda.bindings" else default
        if module == "onnxruntime" and not onnxruntime:
            continue
        version = versions.get(module)
        if module not in missing:
            if version is None or requirement is None or _satisfies(requirement, version):
                keep += DISTRIBUTIONS[module]
                if version is not None and module != "cv2":  # nothing fetched depends on OpenCV; its name varies by vendor
                    constraints.append(f"{DISTRIBUTIONS[module][0]}=={version}")
                continue
            if module in DEVICE_OWNED:
                raise ReleaseError(
                    f"the device has {module} {version}, older than the runtime's minimum {requirement}; a release does not "
                    f"replace it (the device's OpenCV, TensorRT and cuda-python are built against what it has)",
                    hint="update the device's JetPack / DRIVE OS, or install a newer one on the device's Python yourself",
                )
        if requirement is not None:
            requirements.append(requirement)
    return WheelPlan(sorted(requirements), sorted(constraints), sorted({_normalise(name) for name in keep}))


def wheels_folder(requirements: list[str], arch: str, python_abi: str, cache: Path, constraints: list[str] = ()) -> Path:
    """Where the wheels for (requirements, constraints, arch, abi) are cached; complete when it holds COMPLETE."""
    identity = [requirements, arch, python_abi] + ([sorted(constraints)] if constraints else [])
    key = hashlib.sha256(json.dumps(identity).encode()).hexdigest()[:16]
    return cache / "wheels" / key


def wheel_distribution(wheel: Path) -> str:
    """The normalised distribution name of a wheel file (`opencv_python_headless-4.9...whl` -> opencv-python-headless)."""
    return _normalise(wheel.name.split("-")[0])


def download_wheels(
    requirements: list[str], arch: str, python_abi: str, cache: Path, constraints: list[str] = (), keep: list[str] = ()
) -> list[Path]:
    """Binary wheels (with their dependencies) for the target, resolved against `constraints` (the device's own
    packages); cached by (requirements, constraints, arch, abi). Wheels of the `keep` distributions are left out."""
    if not requirements:
        return []
    folder = wheels_folder(requirements, arch, python_abi, cache, list(constraints))
    key = folder.name
    kept = {_normalise(name) for name in keep}
    if (folder / "COMPLETE").is_file():
        return sorted(w for w in folder.glob("*.whl") if wheel_distribution(w) not in kept)
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=folder.parent))
    version = python_abi.removeprefix("cp")
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--quiet",
        "--disable-pip-version-check",
        "--only-binary=:all:",
        "--implementation",
        "cp",
        "--python-version",
        version,
        "--abi",
        python_abi,
        "--dest",
        str(staging),
    ]
    for tag in GLIBC_TAGS:
        command += ["--platform", f"{tag}_{arch}"]
    if constraints:
        (staging / "constraints.txt").write_text("\n".join(constraints) + "\n")
        command += ["--constraint", str(staging / "constraints.txt")]
    done = subprocess.run([*command, *requirements], capture_output=True, text=True, env={**os.environ, "PIP_NO_INPUT": "1"})
    if done.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        detail = (done.stderr.strip().splitlines() or ["pip failed"])[-1]
        against = f" that work with the device's {', '.join(constraints)}" if constraints else ""
        hint = "the host needs PyPI (or a pip index) to prepare an offline release; or install the packages on the device"
        if constraints and "ResolutionImpossible" in done.stderr + done.stdout:
            hint = (
                "no wheel of these declares support for the device's own packages, which a release does not replace: deploy a "
                "TensorRT release (no ONNX Runtime needed), or install a matching build on the device (pip install --user)"
            )
        raise ReleaseError(f"cannot fetch wheels of {', '.join(requirements)}{against} for {arch} {python_abi}: {detail}", hint=hint)
    (staging / "COMPLETE").write_text("\n".join(requirements) + "\n")
    if folder.exists():
        shutil.rmtree(folder)
    os.replace(staging, folder)
    return sorted(w for w in folder.glob("*.whl") if wheel_distribution(w) not in kept)
