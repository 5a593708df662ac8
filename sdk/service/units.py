"""A store's systemd unit file: where it is rendered, and how the root step checks it before systemd reads it.

The unit decides who the service runs as (`User=`) and what it may touch: whoever can write the file systemd reads
can make the service root. So the file never lives where the service may write:

- The deploy renders it into `<root>/units/perception-<pipeline>.service` (folder 0755, file 0644, both the deploy
  login's): the service user (the store owner's group) cannot write either. Units of pipelines no longer committed
  there are removed, and so is any left in `<root>/service` by earlier SDKs.
- The root step (`sudo perception-sdk-root service --root ROOT install`, sdk/service/install.py, run from root's
  own copy of the SDK) never takes the file: it verifies the committed release, renders the unit itself with
  root's settings (`checked_unit`) and writes that text as root's own
  `/etc/systemd/system/perception-<pipeline>.service`, 0644. The deploy's rendering is a preview; the step says
  when it differed.

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
ROOT_TOOL = "/usr/local/sbin/perception-sdk-root"  # root's own copy of the SDK (`sdk export --root-tool`)
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
    root = shlex.quote(str(store.root.resolve()))
    install = f"sudo {ROOT_TOOL} service --root {root} install"
    from sdk.rootsafe import root_owned

    if not root_owned(ROOT_TOOL):
        install += (
            f" (with root's copy of the SDK installed first: `sdk export --root-tool DIR` on the host, then on the device "
            f"as root: install -o root -g root -m 0755 perception-sdk-root {ROOT_TOOL})"
        )
    return {"unit": str(path), "user": runs_as, "user_exists": user_exists, "removed_units": removed, "install": install}


def unit_settings(text: str) -> dict[str, str]:
    """The unit's single-valued settings (User=, Group=, ExecStart=, ...) as sdk/service/unit.py writes them."""
    settings: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and not line.startswith("#"):
            settings.setdefault(key.strip(), value.strip())
    return settings


def root_tool_path() -> str | None:
    """Root's own copy of the SDK where this process runs from one (a zip application, `sdk export --root-tool`)."""
    folder = Path(__import__("sdk").__file__).resolve().parent
    archive = folder.parent
    return str(archive) if archive.is_file() else None


def checked_unit(store, *, group: str | None, allow_root: bool = False) -> tuple[str, str, str | None]:
    """(name, text, note) of the unit root installs for the committed release, rendered by root's own code with
    root's own settings, never with any taken from a file the deploy login wrote (decision 0961):

    - `User=` the pipeline's `service.user`; `root` only when root's step says so (`allow_root`, `--allow-root`);
    - `Group=` the store's group as root read it from the store folder's descriptor (`group`; never root's);
    - the interpreter: the committed release's offline environment (it runs as `User=`, never as root), else
      root's own; `PYTHONPATH`: root's copy of the SDK, the one running this step.

    The committed release is verified first (every byte against its manifest). The deploy's rendering in
    `<root>/units/` is compared only to say whether it differed (`note`)."""
    from sdk.store.verify import verify_release

    committed = store.committed()
    if committed is None:
        raise TargetError(f"{store.root}: no release is committed", hint="deploy one first")
    verify_release(store.release_dir(committed))
    sdk_path = root_tool_path() or str(Path(__import__("sdk").__file__).resolve().parent.parent)
    name, text, spec = render_committed(store, sdk_path=sdk_path, group=group, user=None)
    if spec.service.user == "root" and not allow_root:
        raise TargetError(
            f"the committed pipeline {spec.name!r} asks to run its service as root ({spec.service.root_reason}); refused",
            hint="root decides that, not the deploy: run this step with --allow-root if root agrees",
        )
    rendered = units_dir(store.root) / name
    try:
        fd = os.open(rendered, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as handle:
            theirs = handle.read(1 << 20).decode(errors="replace") if os.fstat(handle.fileno()).st_mode & 0o170000 == 0o100000 else None
    except OSError:
        theirs = None
    note = None
    if theirs is None:
        note = f"the deploy rendered no unit at {rendered}; installing root's rendering"
    elif theirs != text:
        note = f"{rendered} (sha256 {_sha(theirs)}) differs from root's rendering (sha256 {_sha(text)}); root's is installed"
    return name, text, note


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


__all__ = ["MARKER", "UNITS_DIR", "checked_unit", "render_committed", "root_tool_path", "store_group", "unit_settings", "units_dir", "write_unit"]
