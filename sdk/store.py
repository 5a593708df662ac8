"""The release store on a target (RAUC / Capistrano style), operated where the files live.

    <root>/store/<sha256>          content-addressed, read-only objects
    <root>/releases/<id>/...       one folder per release: hard links into the store + manifest.json
    <root>/current -> releases/<id>
    <root>/previous -> releases/<id>

Every step is crash-safe: objects and release folders are built under temporary names and
renamed into place once complete and fsynced; `current` is switched by renaming a new
symlink over it (rename(2) is atomic; `ln -sfn` is not). So `current` always names a
complete release, whatever moment a crash or a kill comes at.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sdk.errors import ReleaseError
from sdk.release import MANIFEST, RELEASE_ID, ReleaseManifest, sha256_of

TMP_PREFIX = ".tmp-"


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class ReleaseStore:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.objects = self.root / "store"
        self.releases = self.root / "releases"

    def ensure(self) -> None:
        for folder in (self.root, self.objects, self.releases):
            folder.mkdir(parents=True, exist_ok=True)

    @contextmanager
    def locked(self) -> Iterator[None]:
        """One deploy at a time per target: a second waits for the lock, never interleaves."""
        self.ensure()
        with (self.root / ".lock").open("a") as handle:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

    # Objects ------------------------------------------------------------------------------
    def object_path(self, sha256: str) -> Path:
        if len(sha256) != 64 or any(c not in "0123456789abcdef" for c in sha256):
            raise ReleaseError(f"invalid object name {sha256!r}")
        return self.objects / sha256

    def has_object(self, sha256: str, size: int, *, verify: bool = False) -> bool:
        """Whether the store holds the object; with `verify`, a damaged one is removed and reported absent."""
        path = self.object_path(sha256)
        try:
            if path.stat().st_size != size:
                raise ValueError
            if verify and sha256_of(path) != sha256:
                raise ValueError
        except FileNotFoundError:
            return False
        except ValueError:
            path.unlink(missing_ok=True)  # never link a damaged object into a release: send it again
            return False
        return True

    def temporary_object(self, sha256: str) -> Path:
        """Where an object is written before `install_object` checks and publishes it."""
        return self.objects / f"{TMP_PREFIX}{sha256}-{os.getpid()}"

    def install_object(self, temporary: Path, sha256: str) -> None:
        """Verify the written bytes, fsync, make read-only, rename into the store."""
        actual = sha256_of(temporary)
        if actual != sha256:
            temporary.unlink(missing_ok=True)
            raise ReleaseError(f"object {sha256[:12]} arrived corrupt (got {actual[:12]}); nothing was installed")
        with temporary.open("rb") as handle:
            os.fsync(handle.fileno())
        temporary.chmod(0o444)
        os.replace(temporary, self.object_path(sha256))
        fsync_dir(self.objects)

    def add_file(self, source: Path, sha256: str) -> None:
        """Copy a local file into the store (the local target's upload)."""
        temporary = self.temporary_object(sha256)
        shutil.copyfile(source, temporary)
        self.install_object(temporary, sha256)

    # Releases -----------------------------------------------------------------------------
    def release_dir(self, release_id: str) -> Path:
        if not RELEASE_ID.match(release_id):
            raise ReleaseError(f"invalid release id {release_id!r}")
        return self.releases / release_id

    def has_release(self, manifest: ReleaseManifest) -> bool:
        folder = self.release_dir(manifest.release_id)
        if not (folder / MANIFEST).is_file():
            return False
        try:
            ReleaseManifest.load(folder).verify(folder)
        except ReleaseError:
            return False
        return True

    def assemble(self, manifest: ReleaseManifest) -> Path:
        """Build releases/<id> from store objects (hard links), then rename it into place."""
        final = self.release_dir(manifest.release_id)
        if self.has_release(manifest):
            return final
        for name, entry in manifest.files.items():
            if not self.has_object(entry.sha256, entry.size):
                raise ReleaseError(f"release {manifest.release_id}: object for {name} is not in the store")
        staging = self.releases / f"{TMP_PREFIX}{manifest.release_id}-{os.getpid()}"
        if staging.exists():
            shutil.rmtree(staging)
        for name, entry in manifest.files.items():
            path = staging / name
            path.parent.mkdir(parents=True, exist_ok=True)
            os.link(self.object_path(entry.sha256), path)
        (staging / MANIFEST).write_text(manifest.to_json())
        with (staging / MANIFEST).open("rb") as handle:
            os.fsync(handle.fileno())
        for folder in sorted({p.parent for p in staging.rglob("*")}, key=lambda p: len(p.parts), reverse=True):
            fsync_dir(folder)
        if final.exists():  # a damaged folder under the final name: set it aside, never activate it
            os.replace(final, self.releases / f"{TMP_PREFIX}damaged-{manifest.release_id}-{os.getpid()}")
        os.replace(staging, final)
        fsync_dir(self.releases)
        return final

    # Activation ---------------------------------------------------------------------------
    def current(self) -> str | None:
        return self._link_target("current")

    def previous(self) -> str | None:
        return self._link_target("previous")

    def _link_target(self, name: str) -> str | None:
        try:
            return Path(os.readlink(self.root / name)).name
        except (FileNotFoundError, OSError):
            return None

    def activate(self, release_id: str) -> None:
        """Point `current` at the release (and `previous` at the one it replaces), atomically."""
        folder = self.release_dir(release_id)
        if not (folder / MANIFEST).is_file():
            raise ReleaseError(f"release {release_id} is not assembled")
        old = self.current()
        if old == release_id:
            return
        if old is not None:
            self._switch_link("previous", old)
        self._switch_link("current", release_id)

    def _switch_link(self, name: str, release_id: str) -> None:
        temporary = self.root / f"{TMP_PREFIX}{name}-{os.getpid()}"
        temporary.unlink(missing_ok=True)
        os.symlink(f"releases/{release_id}", temporary)
        os.replace(temporary, self.root / name)
        fsync_dir(self.root)

    def sweep_temporaries(self) -> int:
        """Remove what crashed runs left under temporary names (never reachable from `current`)."""
        removed = 0
        for folder in (self.root, self.objects, self.releases):
            for path in folder.glob(f"{TMP_PREFIX}*"):
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    path.unlink(missing_ok=True)
                removed += 1
        return removed
