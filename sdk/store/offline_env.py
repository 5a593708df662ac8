"""A release's offline environment on the device: a venv that sees every package the device's Python sees, with the
release's wheels laid into it by the standard library (no pip, no network).

`venv` bases a new environment on the base interpreter: made from a Python that is itself a virtual environment, with
`system_site_packages` alone it would see the base's packages and not that environment's (its onnxruntime, numpy...).
So the site folders of the Python that builds it are added after the release's own (`device-python.pth`, through
`site.addsitedir`, so that their own .pth files count too): the release's wheels first, then what the device had.
CREATED_BY names that Python, for the message of a module still missing (sdk.errors.missing_dependency)."""

from __future__ import annotations

import json
import os
import shutil
import stat
import sys
from pathlib import Path

from sdk.durable import fsync_dir
from sdk.errors import ReleaseError
from sdk.store.activation import TMP_PREFIX

CREATED_BY = ".created-by"  # in the environment: the Python it was made from, and whether that was a virtual environment
RECORD = ".complete"  # written last: the wheels, and every file (sha256, length) and link of the environment


def _listing(folder: Path) -> dict:
    """{"files": {name: [sha256, length]}, "links": {name: target}} of everything under `folder` but its record;
    read as a release is read (sdk/store/verify.py): no link followed, no special file opened."""
    from sdk.store.verify import NotRegular, digest_of

    files, links = {}, {}
    for top, dirs, names in os.walk(folder):
        for name in sorted(dirs + names):
            path = Path(top) / name
            relative = path.relative_to(folder).as_posix()
            if relative == RECORD:
                continue
            mode = path.lstat().st_mode
            if stat.S_ISLNK(mode):
                links[relative] = os.readlink(path)
            elif stat.S_ISREG(mode):
                try:
                    files[relative] = list(digest_of(path))
                except NotRegular:
                    files[relative] = None
            elif not stat.S_ISDIR(mode):
                files[relative] = None  # a special file: never part of an environment this builds
    return {"files": files, "links": links}


def verify_env(env_dir: Path) -> str | None:
    """Check the release's environment against the record written when it was built (decision 0950): every file with
    its length and sha256, every link with its target, nothing else. ReleaseError naming the first difference; a note
    (str) for an environment an earlier SDK built (no record: it is checked again once a deploy rebuilds it); None."""
    from sdk.store.verify import NotRegular, read_regular

    try:
        text = read_regular(Path(env_dir) / RECORD)
    except FileNotFoundError:
        return None  # no environment: the release ships no wheels, or it was never built
    except (OSError, NotRegular) as exc:
        raise ReleaseError(f"{env_dir}: the environment's record cannot be read ({exc})", hint="deploy the pipeline again: it rebuilds it") from None
    try:
        record = json.loads(text)
    except ValueError:
        record = None  # an earlier SDK's: the names of the wheels, one a line
    if not isinstance(record, dict) or not isinstance(record.get("files"), dict):
        return f"{env_dir} was built by an earlier SDK (no record of its files): not verified"
    found = _listing(Path(env_dir))
    for kind in ("files", "links"):
        expected, actual = record.get(kind) or {}, found[kind]
        for name in sorted(set(expected) | set(actual)):
            if name not in actual:
                problem = "is missing"
            elif name not in expected:
                problem = "is not part of it (its record does not list it)"
            elif expected[name] != actual[name]:
                problem = "does not match its record (changed on disk, or a link that leads elsewhere)"
            else:
                continue
            raise ReleaseError(f"the release's environment {env_dir}: {name} {problem}", hint="deploy the pipeline again: it rebuilds it")
    return None


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
    return (True, final / "bin" / "python") if (final / RECORD).is_file() else (False, None)


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
    if (final / RECORD).is_file():
        return python
    final.parent.mkdir(exist_ok=True)
    staging = final.parent / f"{TMP_PREFIX}{final.name}-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    # System site packages stay visible: JetPack's own TensorRT and GStreamer-enabled OpenCV.
    venv.EnvBuilder(system_site_packages=True, with_pip=False, symlinks=True).create(staging)
    site = staging / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    for wheel in wheels:
        _unpack_wheel(wheel, site)
    _see_the_device_python(site)
    record = {"wheels": [w.name for w in wheels], **_listing(staging)}
    (staging / RECORD).write_text(json.dumps(record, sort_keys=True) + "\n")  # last: the environment is complete
    shutil.rmtree(final, ignore_errors=True)
    os.replace(staging, final)
    fsync_dir(final.parent)
    return python


def device_site_dirs() -> list[str]:
    """The site folders the running Python (the device's) imports from, in its order: its own environment's, the
    system's it includes (Debian's dist-packages, JetPack's TensorRT), the user's."""
    return [p for p in sys.path if p and os.path.basename(p.rstrip("/")) in ("site-packages", "dist-packages") and os.path.isdir(p)]


def _see_the_device_python(site: Path) -> None:
    folders = device_site_dirs()
    lines = "".join(f"import site; site.addsitedir({folder!r})\n" for folder in folders)
    (site / "device-python.pth").write_text(lines)
    venv = "a virtual environment" if sys.prefix != sys.base_prefix else "not a virtual environment"
    (site.parents[2] / CREATED_BY).write_text(f"{sys.executable} ({venv}); its site folders: {', '.join(folders) or 'none'}\n")
