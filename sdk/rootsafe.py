"""What root may execute, import and change: root's own files, reached without following anyone else's links.

Three rules (the ones RAUC, Mender and OSTree follow), each a function here:

- `root_owned(path)`: a path root may execute or import from is root's all the way up: the path and every folder
  above it owned by root and writable by no one else (a folder writable by others counts only with its sticky bit
  set, where only an entry's owner may replace it, and the entry is root's). A link on the way is followed only
  when it is root's own and stands in a folder of root's; where it leads is checked the same way.
- `confine_imports()`: a process running as root imports only from such paths. The `sdk` it runs must be root's
  (else `RootPathError`, before anything acts); other `sys.path` entries that are not root's are removed, so no
  module the step imports later can come from them.
- `share_folder(...)`: what root changes in a folder another user can write, it changes through file descriptors:
  each entry opened relative to its folder's descriptor with `O_NOFOLLOW | O_NONBLOCK`, checked with `fstat` on
  that descriptor (a regular file or a folder, owned by whom it should be, one link), changed with `fchown` and
  `fchmod`. A link, a special file, a hard link or another user's file is left as it is and reported; never `-R`
  on a resolved path.

Standard library only: root's steps run on the device's bare Python.
"""

from __future__ import annotations

import os
import stat
import sys
from dataclasses import dataclass, field

from sdk.errors import TargetError

MAX_LINKS = 40  # as the kernel's own limit on links followed in one lookup


class RootPathError(TargetError):
    """Root was asked to execute, import or change something another user controls."""


def _writable_by_others(st: os.stat_result) -> bool:
    return bool(st.st_mode & (stat.S_IWGRP | stat.S_IWOTH))


def why_not_root_owned(path: str | os.PathLike) -> str | None:
    """None when `path` is root's all the way up (see the module's docstring); else why not, naming the part."""
    pending = [p for p in os.path.abspath(os.fspath(path)).split("/") if p]
    here, folder = "/", os.lstat("/")
    if folder.st_uid != 0 or _writable_by_others(folder):
        return "/ is not root's alone"
    links = 0
    while pending:
        name = pending.pop(0)
        if name in (".", ""):
            continue
        if name == "..":
            here = os.path.dirname(here)
            folder = os.lstat(here)
            continue
        candidate = os.path.join(here, name)
        try:
            st = os.lstat(candidate)
        except OSError as exc:
            return f"{candidate}: {exc.strerror}"
        if _writable_by_others(folder) and not (folder.st_mode & stat.S_ISVTX and st.st_uid == 0):
            return f"{here} may be changed by users other than root (mode {stat.S_IMODE(folder.st_mode):o})"
        if st.st_uid != 0:
            return f"{candidate} belongs to uid {st.st_uid}, not to root"
        if stat.S_ISLNK(st.st_mode):
            links += 1
            if links > MAX_LINKS:
                return f"{candidate}: too many links"
            target = os.readlink(candidate)
            pending = [p for p in target.split("/") if p] + pending
            if target.startswith("/"):
                here, folder = "/", os.lstat("/")
            continue
        if pending and not stat.S_ISDIR(st.st_mode):
            return f"{candidate} is not a folder"
        if _writable_by_others(st) and not (pending and st.st_mode & stat.S_ISVTX):
            return f"{candidate} may be changed by users other than root (mode {stat.S_IMODE(st.st_mode):o})"
        here, folder = candidate, st
    return None


def root_owned(path: str | os.PathLike) -> bool:
    return why_not_root_owned(path) is None


def _sdk_folder() -> str:
    import sdk

    return os.path.dirname(os.path.abspath(sdk.__file__))


def confine_imports(*, euid: int | None = None) -> list[str]:
    """As root: refuse an `sdk` that is not root's, and drop every `sys.path` entry that is not (returned). As
    anyone else: nothing (a process that is not root gains nothing by importing what its own user controls)."""
    if (os.geteuid() if euid is None else euid) != 0:
        return []
    folder = _sdk_folder()
    container = _zip_of(folder)
    why = why_not_root_owned(container or folder)
    if why is not None:
        raise RootPathError(
            f"refusing to run as root from {container or folder}: {why}",
            hint="run root's steps with root's own copy of the SDK (sudo perception-sdk-root ...; "
            "`sdk export --root-tool DIR` writes it, docs/security.md says how to install it)",
        )
    dropped = []
    kept = []
    for entry in sys.path:
        real = os.path.abspath(entry or os.getcwd())
        if os.path.exists(real) and why_not_root_owned(_zip_of(real) or real) is not None:
            dropped.append(entry)
        else:
            kept.append(entry)
    sys.path[:] = kept
    return dropped


def _zip_of(path: str) -> str | None:
    """The zip archive a path inside a zip application lives in (`/x/tool.pyz/sdk` -> `/x/tool.pyz`), else None."""
    probe = path
    while probe not in ("/", ""):
        if os.path.isfile(probe):
            return probe
        probe = os.path.dirname(probe)
    return None


def runs_as(root: str | os.PathLike) -> tuple[int, int] | None:
    """(uid, gid) a root process hands the store's work that executes something to: the store's owner, where the
    store is not root's all the way up (a store shared with the deploy login). None where nothing changes: the
    process is not root, or the store is root's own."""
    if os.geteuid() != 0:
        return None
    st = os.stat(root)
    if st.st_uid == 0 and why_not_root_owned(root) is None:
        return None
    if st.st_uid == 0:
        why = why_not_root_owned(root)
        hint = "move the store into a folder only root may change"
        raise RootPathError(f"{root}: root's store in a folder other users may change ({why})", hint=hint)
    return st.st_uid, st.st_gid


def as_user(ids: tuple[int, int] | None, work) -> int:
    """`work()` in a child process that runs as `ids` (uid, gid; no supplementary groups); its exit code: 0 when
    it returned, 1 when it raised. With `ids` None, in this process."""
    if ids is None:
        work()
        return 0
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child: drop root for good before anything of the store is touched
        code = 1
        try:
            os.setgroups([])
            os.setgid(ids[1])
            os.setuid(ids[0])
            work()
            code = 0
        except BaseException as exc:  # reported by the parent's caller as a failed step
            sys.stderr.write(f"error: {getattr(exc, 'message', exc)}\n")
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


@dataclass
class Shared:
    """What `share_folder` did: entries changed, and entries it refused to touch (with why)."""

    changed: int = 0
    created: bool = False
    skipped: list[str] = field(default_factory=list)

    def describe(self) -> dict:
        return {"changed": self.changed, "created": self.created, "left_alone": self.skipped}


FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def open_folder(parent_fd: int, name: str) -> int:
    """The folder `name` in `parent_fd`, opened without following a link (RootPathError if it is one, or not a
    folder)."""
    try:
        fd = os.open(name, FLAGS | os.O_DIRECTORY, dir_fd=parent_fd)
    except OSError as exc:
        if exc.errno in (40, 20):  # ELOOP: a link; ENOTDIR: not a folder
            why = f"{name} is a link or not a folder: refused (root follows no one else's links)"
            raise RootPathError(why, hint="remove it; the step makes it") from None
        raise
    return fd


def share_folder(store_fd: int, name: str, *, owner: int, gid: int, allowed_owners: set[int]) -> Shared:
    """`name` in the store (`store_fd`) made the store owner's and group `gid`'s: folders 2770 (setgid: what
    either manager writes stays in the group), files group-readable and -writable. Created when missing. Only
    entries owned by `allowed_owners`, with one link, regular files and folders, are changed."""
    done = Shared()
    try:
        fd = open_folder(store_fd, name)
    except FileNotFoundError:
        os.mkdir(name, 0o700, dir_fd=store_fd)
        fd = open_folder(store_fd, name)
        os.fchown(fd, owner, gid)
        done.created = True
    try:
        st = os.fstat(fd)
        if st.st_uid not in allowed_owners:
            raise RootPathError(f"{name} belongs to uid {st.st_uid}, not to the store's owner: refused", hint="remove it; the step makes it")
        _share(fd, name, gid, allowed_owners, done)
    finally:
        os.close(fd)
    return done


def _share(fd: int, where: str, gid: int, allowed: set[int], done: Shared, depth: int = 0) -> None:
    st = os.fstat(fd)
    if stat.S_ISDIR(st.st_mode):
        os.fchown(fd, -1, gid)
        os.fchmod(fd, (stat.S_IMODE(st.st_mode) | 0o2070) & ~0o007)
        done.changed += 1
        if depth > 32:
            done.skipped.append(f"{where}: deeper than 32 folders")
            return
        for entry in os.listdir(fd):
            _share_entry(fd, entry, f"{where}/{entry}", gid, allowed, done, depth)
        return
    mode = stat.S_IMODE(st.st_mode)
    os.fchown(fd, -1, gid)
    os.fchmod(fd, (mode | 0o060 | (0o010 if mode & 0o100 else 0)) & ~0o6007)  # g+rwX; never setuid, setgid or others'
    done.changed += 1


def _share_entry(parent: int, name: str, where: str, gid: int, allowed: set[int], done: Shared, depth: int) -> None:
    try:
        st = os.stat(name, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        return
    if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
        done.skipped.append(f"{where}: a link or a special file")
        return
    if st.st_uid not in allowed or (stat.S_ISREG(st.st_mode) and st.st_nlink != 1):
        done.skipped.append(f"{where}: {'another user' if st.st_uid not in allowed else 'a hard link'}'s file")
        return
    try:
        fd = os.open(name, FLAGS | (os.O_DIRECTORY if stat.S_ISDIR(st.st_mode) else 0), dir_fd=parent)
    except OSError:  # replaced meanwhile (by a link, say): left alone
        done.skipped.append(f"{where}: changed while it was opened")
        return
    try:
        now = os.fstat(fd)
        if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino) or now.st_uid not in allowed or (stat.S_ISREG(now.st_mode) and now.st_nlink != 1):
            done.skipped.append(f"{where}: changed while it was opened")
            return
        _share(fd, where, gid, allowed, done, depth + 1)
    finally:
        os.close(fd)


__all__ = [
    "RootPathError", "Shared", "as_user", "confine_imports", "open_folder", "root_owned", "runs_as", "share_folder", "why_not_root_owned",
]
