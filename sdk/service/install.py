"""`sudo perception-sdk-root service --root ROOT install`: the one root step of the locked-down service (decisions 0112, 0961).

It runs from root's own copy of the SDK (`sdk export --root-tool`; sdk/rootsafe.py refuses any other as root). The
deploy logs in as an ordinary user and renders a preview of the unit (units/perception-<pipeline>.service); it cannot
create users or install units. This step, run once on the device as root (and again after a deploy changed the
pipeline), does what needs root and nothing else, acting in the store (the deploy login's folder) only through
file descriptors, never through a link:

1. verifies the committed release and renders its unit with root's own code and settings (sdk/service/units.py
   `checked_unit`): `User=` the pipeline's service user (root only with `--allow-root`), `Group=` the store's group
   read from the store folder's descriptor (never root's), `PYTHONPATH` root's copy of the SDK;
2. creates the unit's `User=` as a system user without a home or a shell, in the store's group (so the SSH login
   reads its status and both managers share the status folder), and in the `video` and `render` groups where they
   exist (camera and GPU nodes are group-owned on L4T);
3. shares the status folder `<root>/service` (made when missing): opened relative to the store's descriptor with
   `O_NOFOLLOW` (a link there is refused), each entry changed with `fchown`/`fchmod` on its own descriptor (group,
   g+rwX, setgid folders); links, special files, hard links and other users' files are left alone and listed;
4. disables and removes this store's units of pipelines no longer committed here (and links to units in the store,
   which earlier SDKs made), writes the text as root's own /etc/systemd/system/<unit> (0644), reloads systemd,
   enables the unit and (re)starts it;
5. where root's trust policy is installed, raises root's version floor to the committed release's signed version.

`--dry-run` prints the steps without doing them. Standard library only beyond the pipeline's schema.
"""

from __future__ import annotations

import grp
import os
import pwd
import shlex
import stat
import subprocess
from pathlib import Path

from sdk.errors import TargetError
from sdk.rootsafe import RootPathError, open_folder, share_folder, why_not_root_owned
from sdk.service.units import MARKER, checked_unit, unit_settings

SYSTEMD_DIR = Path("/etc/systemd/system")
DEVICE_GROUPS = ("video", "render")
WRITE = "write-unit"  # a step done here, not by a command: the text as root's file
SHARE = "share-folder"  # a step done here: the status folder shared through descriptors
SERVICE_DIR = "service"


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


def open_store(root: Path) -> int:
    """The store folder's descriptor, opened without following a link; the folders above it must be root's (else
    the deploy login could swap the store under the step)."""
    root = Path(os.path.abspath(root))
    why = why_not_root_owned(root.parent)
    if why is not None:
        raise RootPathError(f"{root}: the folders above the store must be root's alone: {why}", hint="put the store in a folder only root may change")
    try:
        return os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise RootPathError(f"{root}: not a folder (a link, or missing): {exc.strerror}", hint="give the store's own path with --root") from None


def store_group_of(store_fd: int) -> tuple[int, str | None]:
    """(gid, name) of the store folder, from its descriptor; never root's group."""
    gid = os.fstat(store_fd).st_gid
    if gid == 0:
        return 0, None
    try:
        return gid, grp.getgrgid(gid).gr_name
    except KeyError:
        return gid, None


def plan(store, folder: Path, name: str, text: str, systemd_dir: Path = SYSTEMD_DIR) -> list[list[str]]:
    """The steps that install the unit `name` (`text`): user, the shared folder, stale units, the unit, enable."""
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
    commands.append([SHARE, str(folder), group or "-"])
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
    """The text as root's own file, 0644, renamed into place (a link or a file planted there is replaced)."""
    partial = destination.with_name(f".{destination.name}.partial")
    partial.unlink(missing_ok=True)
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
        os.fchown(handle.fileno(), 0, 0)
        os.fchmod(handle.fileno(), 0o644)
    os.replace(partial, destination)


def _share(store_fd: int, text: str) -> dict:
    settings = unit_settings(text)
    owner = os.fstat(store_fd).st_uid
    gid = os.fstat(store_fd).st_gid
    allowed = {owner}
    try:
        allowed.add(pwd.getpwnam(settings.get("User", "")).pw_uid)
    except KeyError:
        pass
    if owner != 0:
        allowed.discard(0)  # root's files in the login's folder are never changed
    return share_folder(store_fd, SERVICE_DIR, owner=owner, gid=gid, allowed_owners=allowed).describe()


def _runtime_source(name: str) -> bool:
    return name.startswith("sdk/") and name.endswith(".py")


def root_copy_against_release(store) -> dict | None:
    """Root's copy of the SDK (the zip this step runs from) against the committed release's `sdk/` sources, by sha256:
    the unit's supervisor is root's copy, the runtime the release's own. The release's bytecode, where it carries it,
    is compiled from those sources (and used only while it matches them), so the sources are what is compared. None
    when not run from root's copy."""
    import hashlib
    import zipfile

    from sdk.release import ReleaseManifest
    from sdk.service.units import root_tool_path

    tool = root_tool_path()
    committed = store.committed()
    if tool is None or committed is None:
        return None
    listed = {name: entry.sha256 for name, entry in ReleaseManifest.load(store.release_dir(committed)).files.items() if _runtime_source(name)}
    with zipfile.ZipFile(tool) as archive:
        ours = {name: hashlib.sha256(archive.read(name)).hexdigest() for name in archive.namelist() if _runtime_source(name)}
    differ = sorted(name for name in listed.keys() | ours.keys() if listed.get(name) != ours.get(name))
    return {"tool": tool, "same_as_release": not differ, "files_differing": len(differ), **({"e.g.": differ[0]} if differ else {})}


def _root_floor(store) -> dict:
    """Where root's policy is installed, the step also raises root's version floor to the committed release's signed
    version (sdk/store/trust_admin.py `raise_root_floors`): after it, the deploy login cannot bring an older release
    back, whatever it writes in the store."""
    from sdk.errors import ReleaseError
    from sdk.store.trust import POLICY_FILE, trust_root
    from sdk.store.trust_admin import raise_root_floors

    if not (trust_root() / POLICY_FILE).is_file():
        return {"root_floor": "no root policy on this device: the version floor is the deploy login's (docs/security.md)"}
    try:
        return {"root_floor": raise_root_floors(store)["raised"]}
    except ReleaseError as exc:
        raise TargetError(f"the unit is installed, but root's version floor was not raised: {exc.message}", hint=exc.hint) from None


def install(store, dry_run: bool, systemd_dir: Path = SYSTEMD_DIR, *, allow_root: bool = False) -> dict:
    store_fd = open_store(store.root)
    try:
        st = os.fstat(store_fd)
        if not stat.S_ISDIR(st.st_mode):
            raise RootPathError(f"{store.root} is not a folder", hint="give the store's own path with --root")
        try:  # a link where the status folder belongs is refused before anything, --dry-run too
            os.close(open_folder(store_fd, SERVICE_DIR))
        except FileNotFoundError:
            pass  # made by the share step
        _, group = store_group_of(store_fd)
        name, text, note = checked_unit(store, group=group, allow_root=allow_root)
        folder = Path(os.path.abspath(store.root)) / SERVICE_DIR
        commands = plan(store, folder, name, text, systemd_dir)
        shown = [shlex.join(c) for c in commands]
        copy = root_copy_against_release(store)
        if copy is not None and not copy["same_as_release"]:
            skew = f"root's copy of the SDK differs from the committed release's in {copy['files_differing']} file(s): install the host's again"
            note = f"{note}; {skew}" if note else skew
        noted = {"note": note} if note else {}
        noted["root_copy"] = copy
        if dry_run:
            return {"unit": name, "text": text, "commands": shown, "ran": False, **noted}
        if os.geteuid() != 0:
            hint = f"run it with sudo; --dry-run shows: {shown[0]}"
            raise TargetError("installing the service needs root (user, permissions, systemctl)", hint=hint)
        shared = None
        for command, shown_text in zip(commands, shown, strict=True):
            if command[0] == WRITE:
                write_root_unit(Path(command[1]), text)
                continue
            if command[0] == SHARE:
                shared = _share(store_fd, text)
                continue
            done = subprocess.run(command, capture_output=True, text=True)
            if done.returncode != 0:
                hint = "fix the cause and run install again (every step may be repeated)"
                raise TargetError(f"{shown_text} failed: {done.stderr.strip()[-300:]}", hint=hint)
        return {"unit": name, "installed": str(systemd_dir / name), "commands": shown, "ran": True, "shared": shared, **noted, **_root_floor(store)}
    finally:
        os.close(store_fd)


__all__ = ["install", "open_store", "plan", "stale_units", "unit_settings", "write_root_unit"]
