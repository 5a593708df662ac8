"""`sudo python3 -m sdk service --root ROOT install`: the one root step of the locked-down service (decision 0112).

The deploy logs in as an ordinary user and renders the unit (service/perception-<pipeline>.service);
it cannot create users or link units. This step, run once on the device as root (and again after a
deploy changed the pipeline), does what needs root and nothing else:

1. creates the unit's `User=` as a system user without a home or a shell, in the store owner's group
   (`Group=`, so the SSH login reads its status and both managers share the status folder), and in the
   `video` and `render` groups where they exist (camera and GPU nodes are group-owned on L4T);
2. makes the status folder group-writable with the setgid bit, so files either manager writes stay in
   the store owner's group;
3. disables and removes the links of units of this store whose file is gone (pipelines no longer
   committed here), then links and enables the current unit and (re)starts it.

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

SYSTEMD_DIR = Path("/etc/systemd/system")
DEVICE_GROUPS = ("video", "render")


def unit_settings(unit: Path) -> dict[str, str]:
    """The unit's single-valued settings (User=, Group=, ...) as written by sdk/service/unit.py."""
    settings: dict[str, str] = {}
    for line in unit.read_text().splitlines():
        key, sep, value = line.partition("=")
        if sep and not line.startswith("#"):
            settings.setdefault(key.strip(), value.strip())
    return settings


def stale_links(folder: Path, systemd_dir: Path = SYSTEMD_DIR) -> list[Path]:
    """Links in systemd's folder to units of this status folder whose file was removed (another pipeline now runs here)."""
    stale = []
    for link in sorted(systemd_dir.glob("perception-*.service")) if systemd_dir.is_dir() else ():
        if link.is_symlink():
            target = Path(os.readlink(link))
            if target.parent == folder and not target.exists():
                stale.append(link)
    return stale


def plan(folder: Path, unit: Path, systemd_dir: Path = SYSTEMD_DIR) -> list[list[str]]:
    """The commands that install `unit`: user, permissions, stale links, link and enable."""
    settings = unit_settings(unit)
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
    for link in stale_links(folder, systemd_dir):
        commands.append(["systemctl", "disable", "--now", link.name])
        commands.append(["rm", "-f", str(link)])
    commands.append(["systemctl", "link", str(unit)])
    commands.append(["systemctl", "enable", unit.name])
    commands.append(["systemctl", "restart", unit.name])
    return commands


def _group_exists(name: str) -> bool:
    try:
        grp.getgrnam(name)
    except KeyError:
        return False
    return True


def install(folder: Path, dry_run: bool) -> dict:
    units = sorted(folder.glob("perception-*.service"))
    if not units:
        raise TargetError(f"{folder}: no unit to install", hint="deploy a pipeline first: the deploy renders its unit here")
    commands = plan(folder, units[-1])
    shown = [shlex.join(c) for c in commands]
    if dry_run:
        return {"unit": str(units[-1]), "commands": shown, "ran": False}
    if os.geteuid() != 0:
        raise TargetError("installing the service needs root (user, permissions, systemctl)", hint=f"run it with sudo; --dry-run shows: {shown[0]}")
    for command, text in zip(commands, shown, strict=True):
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise TargetError(f"{text} failed: {done.stderr.strip()[-300:]}", hint="fix the cause and run install again (every step may be repeated)")
    return {"unit": str(units[-1]), "commands": shown, "ran": True}


__all__ = ["install", "plan", "stale_links", "unit_settings"]
