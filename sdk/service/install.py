"""`sudo python3 -m sdk service --root ROOT install`: the one root step of the locked-down service (decision 0112).

The deploy logs in as an ordinary user and renders the unit (units/perception-<pipeline>.service, sdk/service/
units.py); it cannot create users or install units. This step, run once on the device as root (and again after a
deploy changed the pipeline), does what needs root and nothing else:

1. checks the rendered unit: the committed pipeline's, and exactly what the SDK renders for the committed release
   (an edited or planted unit is refused before anything else is done);
2. creates the unit's `User=` as a system user without a home or a shell, in the store owner's group
   (`Group=`, so the SSH login reads its status and both managers share the status folder), and in the
   `video` and `render` groups where they exist (camera and GPU nodes are group-owned on L4T);
3. makes the status folder group-writable with the setgid bit, so files either manager writes stay in
   the store owner's group;
4. disables and removes this store's units of pipelines no longer committed here (and links to units in the store,
   which earlier SDKs made), writes the checked text as root's own /etc/systemd/system/<unit> (0644), reloads
   systemd, enables the unit and (re)starts it.

`--dry-run` prints the commands without running them. Standard library only: it runs on the bare Python.
"""

from __future__ import annotations

import grp
import os
import pwd
import shlex
import subprocess
from pathlib import Path

from sdk.errors import TargetError
from sdk.service.units import MARKER, checked_unit, unit_settings

SYSTEMD_DIR = Path("/etc/systemd/system")
DEVICE_GROUPS = ("video", "render")
WRITE = "write-unit"  # a step done here, not by a command: the checked text written as root's file


def stale_units(root: Path, keep: str, systemd_dir: Path = SYSTEMD_DIR) -> list[Path]:
    """This store's units in systemd's folder other than `keep`: files whose first line names this store, and links
    into the store (as earlier SDKs installed them). Another store's units are never touched."""
    root = Path(root).resolve()
    stale = []
    for path in sorted(systemd_dir.glob("perception-*.service")) if systemd_dir.is_dir() else ():
        if path.name == keep and not path.is_symlink():
            continue
        if path.is_symlink():
            target = Path(os.readlink(path))
            if root in target.parents:
                stale.append(path)
            continue
        try:
            first = path.read_text().splitlines()[:1]
        except OSError:
            continue
        if first == [f"{MARKER}{root}"]:
            stale.append(path)
    return stale


def plan(store, folder: Path, name: str, text: str, systemd_dir: Path = SYSTEMD_DIR) -> list[list[str]]:
    """The steps that install the checked unit `name` (`text`): user, permissions, stale units, the unit, enable."""
    settings = unit_settings(text)
    user, group = settings.get("User"), settings.get("Group")
    commands: list[list[str]] = []
    if user and user != "root":
        try:
            pwd.getpwnam(user)
        except KeyError:
            extra = [g for g in DEVICE_GROUPS if _group_exists(g)]
            command = ["useradd", "--system", "--no-create-home", "--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin"]
            command += (["--gid", group] if group else ["--user-group"]) + (["--groups", ",".join(extra)] if extra else [])
            commands.append([*command, user])
    if group:
        commands.append(["chgrp", "-R", group, str(folder)])
    commands.append(["chmod", "-R", "g+rwX", str(folder)])
    commands.append(["find", str(folder), "-type", "d", "-exec", "chmod", "g+s", "{}", "+"])
    for path in stale_units(store.root, name, systemd_dir):
        commands.append(["systemctl", "disable", "--now", path.name])
        commands.append(["rm", "-f", str(path)])
    commands.append([WRITE, str(systemd_dir / name)])
    commands.append(["systemctl", "daemon-reload"])
    commands.append(["systemctl", "enable", name])
    commands.append(["systemctl", "restart", name])
    return commands


def _group_exists(name: str) -> bool:
    try:
        grp.getgrnam(name)
    except KeyError:
        return False
    return True


def write_root_unit(destination: Path, text: str) -> None:
    """The checked text as root's own file, 0644, renamed into place (a link or a file planted there is replaced)."""
    partial = destination.with_name(f".{destination.name}.partial")
    partial.unlink(missing_ok=True)
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.chown(partial, 0, 0)
    os.chmod(partial, 0o644)
    os.replace(partial, destination)


def install(store, folder: Path, dry_run: bool, systemd_dir: Path = SYSTEMD_DIR) -> dict:
    name, text = checked_unit(store)
    commands = plan(store, folder, name, text, systemd_dir)
    shown = [shlex.join(c) for c in commands]
    if dry_run:
        return {"unit": name, "commands": shown, "ran": False}
    if os.geteuid() != 0:
        raise TargetError("installing the service needs root (user, permissions, systemctl)", hint=f"run it with sudo; --dry-run shows: {shown[0]}")
    for command, shown_text in zip(commands, shown, strict=True):
        if command[0] == WRITE:
            write_root_unit(Path(command[1]), text)
            continue
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            hint = "fix the cause and run install again (every step may be repeated)"
            raise TargetError(f"{shown_text} failed: {done.stderr.strip()[-300:]}", hint=hint)
    return {"unit": name, "installed": str(systemd_dir / name), "commands": shown, "ran": True}


__all__ = ["install", "plan", "stale_units", "unit_settings", "write_root_unit"]
