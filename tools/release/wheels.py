"""Wheels for what the device's Python lacks, for the device's architecture and Python, fetched on the host.

Vehicles are often offline: the host (which reaches PyPI) downloads binary wheels with pip for
the target platform, they travel in the release (`wheels/`), and the device installs them into
a per-release environment without any network (`python -m sdk store env`).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from sdk.errors import ReleaseError
from sdk.probe import PIPELINE_MODULES, RUNTIME_MODULES
from sdk.spec.schema import Pipeline

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

    cuda-bindings 13.x needs a CUDA 13 driver (580.65 or later), 12.x runs on any CUDA 12 driver
    (525.60.13 or later: the CUDA 12 minor-version compatibility baseline) (cuda-bindings 12.9 and 13.x
    installation pages), so JetPack 6 (CUDA 12.6) needs `<13`: unbounded, pip picks 13.x and it fails."""
    if not cuda:
        return None
    try:
        major = int(str(cuda).split(".")[0])
    except ValueError:
        raise ReleaseError(f"the device reports CUDA {cuda!r}, not a version like 12.6") from None
    return f"cuda-bindings>={major},<{major + 1}"


def pipeline_modules(spec: Pipeline) -> tuple[str, ...]:
    """The modules of sdk.probe.PIPELINE_MODULES this pipeline runs: scipy where it tracks (`track:`)."""
    return ("scipy",) if spec.track is not None else ()


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


def wheels_folder(requirements: list[str], arch: str, python_abi: str, cache: Path) -> Path:
    """Where the wheels for (requirements, arch, abi) are cached; complete when it holds COMPLETE."""
    key = hashlib.sha256(json.dumps([requirements, arch, python_abi]).encode()).hexdigest()[:16]
    return cache / "wheels" / key


def download_wheels(requirements: list[str], arch: str, python_abi: str, cache: Path) -> list[Path]:
    """Binary wheels (with their dependencies) for the target; cached by (requirements, arch, abi)."""
    if not requirements:
        return []
    folder = wheels_folder(requirements, arch, python_abi, cache)
    key = folder.name
    if (folder / "COMPLETE").is_file():
        return sorted(folder.glob("*.whl"))
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
    done = subprocess.run([*command, *requirements], capture_output=True, text=True, env={**os.environ, "PIP_NO_INPUT": "1"})
    if done.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        detail = (done.stderr.strip().splitlines() or ["pip failed"])[-1]
        raise ReleaseError(
            f"cannot fetch wheels of {', '.join(requirements)} for {arch} {python_abi}: {detail}",
            hint="the host needs PyPI (or a pip index) to prepare an offline release; or install the packages on the device",
        )
    (staging / "COMPLETE").write_text("\n".join(requirements) + "\n")
    if folder.exists():
        shutil.rmtree(folder)
    os.replace(staging, folder)
    return sorted(folder.glob("*.whl"))
