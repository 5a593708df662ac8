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
from sdk.probe import RUNTIME_MODULES

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


def requirements_for(missing_modules: list[str]) -> list[str]:
    unknown = [m for m in missing_modules if m not in RUNTIME_MODULES]
    if unknown:
        raise ReleaseError(f"the device lacks modules the SDK does not know how to ship: {', '.join(unknown)}")
    return sorted(RUNTIME_MODULES[m] for m in missing_modules)


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
