"""A store's systemd unit file: where it is rendered, and how the root step checks it before systemd reads it.

The unit decides who the service runs as (`User=`) and what it may touch: whoever can write the file systemd reads
can make the service root. So the file never lives where the service may write:

- The deploy renders it into `<root>/units/perception-<pipeline>.service` (folder 0755, file 0644, both the deploy
  login's): the service user (the store owner's group) cannot write either. Units of pipelines no longer committed
  there are removed, and so is any left in `<root>/service` by earlier SDKs.
- The root step (`python -m sdk service --root ROOT install`, sdk/service/install.py) takes only the committed
  pipeline's unit; renders it again from the committed release with the settings the file names (its Python, its
  `PYTHONPATH`, `User=`, `Group=`) and refuses it unless the two are the same, byte for byte: a unit edited after
  the deploy, or planted under another name, is refused. It writes the text it checked (never copies the file
  again) as root's own `/etc/systemd/system/perception-<pipeline>.service`, 0644.

The first line of every rendered unit names its store (`MARKER`), so the root step finds, disables and removes the
units of pipelines this store no longer runs, and never another store's.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import sys
from pathlib import Path

from sdk.errors import TargetError

UNITS_DIR = "units"
MARKER = "# perception-sdk store: "


def units_dir(root: Path) -> Path:
    return Path(root) / UNITS_DIR


def store_group(root: Path) -> str | None:
    """The store owner's group (the SSH login reads the service's status through it); never root's (gid 0)."""
    import grp

    gid = Path(root).stat().st_gid
    if gid == 0:
        return None
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return None


def render_committed(store, *, user: str | None = None, python: str | None = None, sdk_path: str | None = None, group: str | None = None):
    """(unit name, unit text, pipeline spec) of the store's committed release, rendered with these settings (by
    default: the release's environment, this process's `sdk`, the store owner's group)."""
    import sdk
    from sdk.release import load_release
    from sdk.service.unit import render_unit, systemd_version, unit_name

    current = store.committed()
    if current is None:
        raise TargetError(f"{store.root}: no release is committed", hint="deploy one first")
    _, pipeline, _ = load_release(store.release_dir(current))
    spec = pipeline.spec
    if python is None:
        env_python = store.env_dir(current) / "bin" / "python"
        python = str(env_python if env_python.exists() else Path(sys.executable))
    if sdk_path is None:
        sdk_path = str(Path(sdk.__file__).resolve().parent.parent)  # the store code that runs this (the agent on a device)
    root = store.root.resolve()
    if user == "root" and spec.service.root_reason is None:
        raise TargetError("--user root needs the pipeline's service.root_reason", hint="say why in the pipeline file (service: root_reason: ...)")
    text = render_unit(spec, root=str(root), python=python, sdk_path=sdk_path, group=group, user=user, systemd=systemd_version())
    return unit_name(spec.name), f"{MARKER}{root}\n{text}", spec


def write_unit(store, user: str | None) -> dict:
    """units/perception-<pipeline>.service for the committed release (rendered, not installed: that needs root)."""
    import pwd

    name, text, spec = render_committed(store, user=user, group=store_group(store.root))
    folder = units_dir(store.root)
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o755)  # the service user (the store owner's group) may read it, never write it
    path = folder / name
    partial = folder / f".{name}.partial"
    partial.write_text(text)
    partial.chmod(0o644)
    os.replace(partial, path)
    removed = [old.name for old in sorted(folder.glob("perception-*.service")) if old.name != name]
    for old in removed:
        (folder / old).unlink(missing_ok=True)
    for legacy in sorted((store.root / "service").glob("perception-*.service")):  # where earlier SDKs rendered it
        legacy.unlink(missing_ok=True)
        if legacy.name != name:
            removed.append(legacy.name)
    runs_as = user or spec.service.user
    try:
        pwd.getpwnam(runs_as)
        user_exists = True
    except KeyError:
        user_exists = False
    sdk_path = str(Path(__import__("sdk").__file__).resolve().parent.parent)
    root = shlex.quote(str(store.root.resolve()))
    install = f"sudo env PYTHONPATH={shlex.quote(sdk_path)} {shlex.quote(sys.executable)} -m sdk service --root {root} install"
    return {"unit": str(path), "user": runs_as, "user_exists": user_exists, "removed_units": removed, "install": install}


def unit_settings(text: str) -> dict[str, str]:
    """The unit's single-valued settings (User=, Group=, ExecStart=, ...) as sdk/service/unit.py writes them."""
    settings: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and not line.startswith("#"):
            settings.setdefault(key.strip(), value.strip())
    return settings


def _unquote(value: str) -> list[str]:
    return shlex.split(value.replace("%%", "%"))


def checked_unit(store) -> tuple[str, str]:
    """(name, text) of the committed pipeline's rendered unit, once it is exactly what the SDK renders; TargetError
    naming what differs otherwise (an edited unit, a planted one, or none rendered)."""
    folder = units_dir(store.root)
    name, _, _ = render_committed(store)
    path = folder / name
    others = sorted(p.name for p in folder.glob("perception-*.service") if p.name != name) if folder.is_dir() else []
    if others:
        raise TargetError(
            f"{folder}: unit(s) {', '.join(others)} are not the committed pipeline's ({name}); refused",
            hint="a deploy renders exactly one unit; remove the others and deploy again",
        )
    try:
        st = os.lstat(path)
        text = path.read_text()
    except FileNotFoundError:
        hint = "deploy the pipeline first: the deploy renders its unit"
        raise TargetError(f"{path}: no unit rendered for the committed pipeline", hint=hint) from None
    if not (st.st_mode & 0o170000 == 0o100000) or st.st_mode & 0o022:
        raise TargetError(f"{path} is not a regular file that only its owner may write; refused", hint="deploy again to render it")
    settings = unit_settings(text)
    try:
        python = _unquote(settings["ExecStart"])[0]
        sdk_path = _unquote(settings["Environment"])[0].removeprefix("PYTHONPATH=")
    except (KeyError, IndexError, ValueError):
        raise TargetError(f"{path} is not a unit this SDK rendered; refused", hint="deploy again to render it") from None
    user, group = settings.get("User"), settings.get("Group")
    try:
        _, expected, spec = render_committed(store, user=user, python=python, sdk_path=sdk_path, group=group)
    except (TargetError, ValueError) as exc:
        raise TargetError(f"{path}: {getattr(exc, 'message', exc)}; refused", hint="deploy again to render it") from None
    if user not in (spec.service.user, "root"):
        raise TargetError(f"{path}: User={user} is not the pipeline's service.user ({spec.service.user}); refused", hint="deploy again")
    if text != expected:
        raise TargetError(
            f"{path} differs from the unit the SDK renders for the committed release (sha256 {_sha(text)}, expected {_sha(expected)}): "
            "edited after the deploy; refused",
            hint="deploy again to render it, then run this step again",
        )
    return name, text


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


__all__ = ["MARKER", "UNITS_DIR", "checked_unit", "render_committed", "store_group", "unit_settings", "units_dir", "write_unit"]
