"""Only checked bytes start: a release folder checked against its manifest, file by file, before it runs.

What is checked, each time a release is started (the service, a measured run, a health check, a selftest), and at
the trial and the commit:

- the manifest is the one this folder is named for (its file list hashes to the folder's release id);
- every listed file is a regular file (never a link, a FIFO or a device), with its length and its sha256;
- every folder on the way is a real folder (no link leads outside the release);
- nothing else is there: a file the manifest does not list (a planted module, a stray `.pyc` that Python would
  load in place of its source) fails the check like a changed one.

Every byte is hashed at every check: nothing is cached (decision 0950). A cache keyed on a file's identity hides
storage corruption (a byte flipped under the file system changes no time stamp), and a cache anyone else can write
would decide what runs. Hashing costs tens of milliseconds for the example release (docs/performance.md).

Each file is opened once, `O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC`, and judged by `fstat` of that descriptor:
a link is refused by the open itself, a FIFO or a device is refused without a read (so nothing blocks), and the
length and the hash come from the same descriptor, so the bytes hashed are the bytes of the file that was checked.
At most the listed length (and one byte more, to see a file that grew) is read: every check is bounded in time by
the size of the release. Nothing is written.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from pathlib import Path

from sdk.errors import ReleaseError
from sdk.release import MANIFEST, SIGNATURE, ReleaseManifest

CHUNK = 1 << 20
OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class NotRegular(OSError):
    """The path is a link, a FIFO, a device or a folder: never read (an OSError, so callers that take an unreadable
    file as damage take this one the same way)."""

    def __init__(self, path: str) -> None:
        super().__init__(errno.EINVAL, "not a regular file (a link or a special file)", path)


def open_regular(path: Path) -> tuple[int, os.stat_result]:
    """A descriptor on the regular file at `path` and its fstat, without following a link and without blocking on a
    special file; NotRegular otherwise (FileNotFoundError passes through)."""
    try:
        fd = os.open(path, OPEN_FLAGS)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENXIO, errno.EISDIR, errno.ENOTDIR):  # a link; a FIFO's or socket's open
            raise NotRegular(str(path)) from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise NotRegular(str(path))
    return fd, st


def read_regular(path: Path, limit: int = 16 << 20) -> bytes:
    """The bytes of a small regular file (a manifest, a signature), read as `open_regular` opens it; at most `limit`."""
    fd, st = open_regular(path)
    try:
        if st.st_size > limit:
            raise ReleaseError(f"{path}: {st.st_size} bytes, more than the {limit} this file may have")
        chunks = []
        while block := os.read(fd, CHUNK):
            chunks.append(block)
            if sum(map(len, chunks)) > limit:
                raise ReleaseError(f"{path}: more than the {limit} bytes this file may have")
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_text(path: Path, limit: int = 16 << 20) -> str:
    """`read_regular` as text: what the store reads of its own small records (state, trial, signature, keys)."""
    return read_regular(path, limit).decode()


def _digest(fd: int, size: int) -> str | None:
    """sha256 of exactly `size` bytes from `fd`; None when the file holds fewer or more (changed while read)."""
    digest = hashlib.sha256()
    left = size
    while left > 0:
        block = os.read(fd, min(CHUNK, left))
        if not block:
            return None
        digest.update(block)
        left -= len(block)
    return None if os.read(fd, 1) else digest.hexdigest()


def digest_of(path: Path) -> tuple[str, int]:
    """(sha256, length) of the regular file at `path`, read from one descriptor (NotRegular for anything else)."""
    fd, st = open_regular(path)
    try:
        digest = _digest(fd, st.st_size)
    finally:
        os.close(fd)
    if digest is None:
        raise ReleaseError(f"{path}: changed while it was read")
    return digest, st.st_size


def check_file(path: Path, size: int, sha256: str) -> str | None:
    """Why the file at `path` is not the listed one (missing, a link or special file, another length or hash), or None."""
    try:
        fd, st = open_regular(path)
    except FileNotFoundError:
        return "is missing"
    except NotRegular:
        return "is not a regular file (a link or a special file)"
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    try:
        if st.st_size != size:
            return f"does not match its manifest ({st.st_size} bytes, listed {size})"
        try:
            digest = _digest(fd, size)
        except OSError as exc:  # EIO: a failing medium
            return f"cannot be read ({exc.strerror or exc})"
    finally:
        os.close(fd)
    if digest != sha256:
        return "does not match its manifest (changed on disk)"
    return None


def verify_release(folder: Path, *, strict: bool = True) -> ReleaseManifest:
    """The folder's manifest, once every byte of the release is what it lists; ReleaseError naming the first
    file that is not (missing, changed, a link or special file, or not listed at all). `strict` (a release in a
    store): the folder is named for its manifest and holds nothing else; a loose release folder (a development run)
    is checked file by file only."""
    folder = Path(folder)
    manifest = load_manifest(folder)
    release = manifest.release_id
    if strict and release != folder.name:
        raise ReleaseError(f"release {folder.name}: its manifest is release {release}'s (the folder was edited or swapped)")
    expected = set(manifest.files)
    for name in sorted(expected):
        entry = manifest.files[name]
        problem = check_file(folder / name, entry.size, entry.sha256)
        if problem:
            raise ReleaseError(f"release {release}: {name} {problem}")
    if strict:
        _only_listed(folder, release, expected, {Path(name).parent for name in expected})
    return manifest


def load_manifest(folder: Path) -> ReleaseManifest:
    """The manifest of a release folder, read as a regular file (never through a link, never blocking)."""
    path = Path(folder) / MANIFEST
    try:
        text = read_regular(path).decode()
    except (OSError, UnicodeDecodeError) as exc:
        raise ReleaseError(f"{path}: cannot read the release manifest: {getattr(exc, 'strerror', None) or exc}") from None
    except NotRegular:
        raise ReleaseError(f"{path}: the release manifest is not a regular file (a link or a special file)") from None
    return ReleaseManifest.from_json(text, where=str(path))


def _only_listed(folder: Path, release: str, expected: set[str], folders: set[Path]) -> None:
    """Nothing in the release folder but what the manifest lists (and the manifest and its signature)."""
    allowed = expected | {MANIFEST, SIGNATURE}
    for top, dirs, files in os.walk(folder):
        here = Path(top).relative_to(folder)
        for name in dirs:
            relative = here / name
            if (folder / relative).is_symlink() or not any(relative == f or relative in f.parents for f in folders):
                raise ReleaseError(f"release {release}: {relative} is not part of the release (a link or a folder its manifest does not list)")
        for name in files:
            relative = (here / name).as_posix()
            if relative not in allowed:
                raise ReleaseError(f"release {release}: {relative} is not part of the release (its manifest does not list it)")


__all__ = ["NotRegular", "check_file", "digest_of", "load_manifest", "open_regular", "read_regular", "read_text", "verify_release"]
