"""Only checked bytes start: a release folder checked against its manifest, file by file, before it runs.

What is checked, each time a release is started (the service, a measured run, a health check, a selftest):

- the manifest is the one this folder is named for (its file list hashes to the folder's release id);
- every listed file is a regular file (never a link), with its length and its sha256;
- every folder on the way is a real folder (no link leads outside the release);
- nothing else is there: a file the manifest does not list (a planted module, a stray `.pyc` that Python would
  load in place of its source) fails the check like a changed one.

Hashing every byte at every restart would cost a service its restart time, so a verified hash is cached by the
file's identity: device, inode, length, modification time and change time (`st_ctime`, which no user can set:
any write, chmod or rename of the file moves it). A file whose identity changed is hashed again. The cache is
`<root>/service/verified.json` (the one folder both the deploy login and the service may write); where it cannot
be written (a full or read-only disk) the check hashes everything and still decides.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

from sdk.errors import ReleaseError
from sdk.release import MANIFEST, SIGNATURE, ReleaseManifest

CACHE_FILE = "verified.json"
CACHE_DIR = "service"
CACHE_LIMIT = 20_000  # entries; the oldest releases' go first (a cache is never a reason to refuse)
CHUNK = 1 << 20


class VerifyCache:
    """sha256 of files by identity (see the module's docstring); loaded once, saved when it changed."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.entries: dict[str, list] = {}
        self.changed = False
        if path is not None:
            try:
                data = json.loads(path.read_text())
                if isinstance(data, dict):
                    self.entries = {k: v for k, v in data.items() if isinstance(v, list) and len(v) == 4}
            except (OSError, ValueError):
                pass

    @staticmethod
    def key(st: os.stat_result) -> tuple[str, list]:
        return f"{st.st_dev}:{st.st_ino}", [st.st_size, st.st_mtime_ns, st.st_ctime_ns]

    def get(self, st: os.stat_result) -> str | None:
        name, identity = self.key(st)
        entry = self.entries.get(name)
        return entry[3] if entry is not None and entry[:3] == identity else None

    def put(self, st: os.stat_result, digest: str) -> None:
        name, identity = self.key(st)
        self.entries[name] = [*identity, digest]
        self.changed = True

    def save(self) -> None:
        if self.path is None or not self.changed:
            return
        entries = list(self.entries.items())[-CACHE_LIMIT:]
        partial = self.path.with_name(f".{self.path.name}.{os.getpid()}.partial")
        try:
            partial.write_text(json.dumps(dict(entries)))
            os.replace(partial, self.path)
            self.changed = False
        except OSError:  # a full or read-only disk: the next start hashes again
            try:
                partial.unlink(missing_ok=True)
            except OSError:
                pass


def cache_for(root: Path | None) -> VerifyCache:
    return VerifyCache(Path(root) / CACHE_DIR / CACHE_FILE if root is not None else None)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as handle:
        while block := handle.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()


def verify_release(folder: Path, cache: VerifyCache | None = None, *, strict: bool = True) -> ReleaseManifest:
    """The folder's manifest, once every byte of the release is what it lists; ReleaseError naming the first
    file that is not (missing, changed, a link, or not listed at all). `strict` (a release in a store): the
    folder is named for its manifest and holds nothing else; a loose release folder (a development run) is
    checked file by file only."""
    folder = Path(folder)
    cache = cache if cache is not None else VerifyCache(None)
    manifest = ReleaseManifest.load(folder)
    release = manifest.release_id
    if strict and release != folder.name:
        raise ReleaseError(f"release {folder.name}: its manifest is release {release}'s (the folder was edited or swapped)")
    expected = set(manifest.files)
    folders = {Path(name).parent for name in expected}
    try:
        for name in sorted(expected):
            path = folder / name
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                raise ReleaseError(f"release {release}: {name} is missing") from None
            if not stat.S_ISREG(st.st_mode):
                raise ReleaseError(f"release {release}: {name} is not a regular file (a link or a special file)")
            entry = manifest.files[name]
            if st.st_size != entry.size:
                raise ReleaseError(f"release {release}: {name} does not match its manifest ({st.st_size} bytes, listed {entry.size})")
            digest = cache.get(st)
            if digest is None:
                digest = _sha256(path)
                cache.put(os.lstat(path), digest)
            if digest != entry.sha256:
                raise ReleaseError(f"release {release}: {name} does not match its manifest (changed on disk)")
        if strict:
            _only_listed(folder, release, expected, folders)
    finally:
        cache.save()
    return manifest


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


__all__ = ["VerifyCache", "cache_for", "verify_release"]
