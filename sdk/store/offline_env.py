"""A release's offline environment on the device: a venv seeing the system's packages, with the
release's wheels laid into it by the standard library (no pip, no network)."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from sdk.errors import ReleaseError
from sdk.store.activation import TMP_PREFIX, fsync_dir


def _unpack_wheel(wheel: Path, site: Path) -> None:
    """Install a wheel the way pip lays it out: files into site-packages, `*.data/{purelib,platlib}` too."""
    import zipfile

    root = site.resolve()
    with zipfile.ZipFile(wheel) as archive:
        for member in archive.infolist():
            if member.is_dir():
                continue
            parts = Path(member.filename).parts
            if len(parts) > 2 and parts[0].endswith(".data"):
                if parts[1] not in ("purelib", "platlib"):
                    continue  # scripts and headers: the runtime needs neither
                parts = parts[2:]
            destination = (root / Path(*parts)).resolve()
            if root not in destination.parents:
                raise ReleaseError(f"{wheel.name}: member {member.filename!r} leaves site-packages")
            destination.parent.mkdir(parents=True, exist_ok=True)
            with archive.open(member) as source, destination.open("wb") as target:
                shutil.copyfileobj(source, target)


def existing_env(release_dir: Path, env_dir: Path) -> tuple[bool, Path | None]:
    """(True, its python or None without wheels) when nothing needs building: read only, so a full or read-only
    store still answers; (False, None) when the environment must be built first."""
    if not any((release_dir / "wheels").glob("*.whl")):
        return True, None
    final = env_dir
    return ((True, final / "bin" / "python") if (final / ".complete").is_file() else (False, None))


def build_env(release_dir: Path, env_dir: Path) -> Path | None:
    """A virtual environment for the release's wheels (offline), seeing the system's packages.

    Made with the standard library only (venv without pip; wheels are zip archives laid
    into site-packages), so it works on a device that has no pip and no network. Returns
    the environment's python, or None when the release carries no wheels.
    """
    import venv

    wheels = sorted((release_dir / "wheels").glob("*.whl"))
    if not wheels:
        return None
    final = env_dir
    python = final / "bin" / "python"
    if (final / ".complete").is_file():
        return python
    final.parent.mkdir(exist_ok=True)
    staging = final.parent / f"{TMP_PREFIX}{final.name}-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    # System site packages stay visible: JetPack's own TensorRT and GStreamer-enabled OpenCV.
    venv.EnvBuilder(system_site_packages=True, with_pip=False, symlinks=True).create(staging)
    site = staging / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    for wheel in wheels:
        _unpack_wheel(wheel, site)
    (staging / ".complete").write_text("\n".join(w.name for w in wheels) + "\n")
    shutil.rmtree(final, ignore_errors=True)
    os.replace(staging, final)
    fsync_dir(final.parent)
    return python
