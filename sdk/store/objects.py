"""The release store on a target (RAUC / Capistrano style), operated where the files live.

    <root>/store/<sha256>          content-addressed, read-only objects
    <root>/releases/<id>/...       one folder per release: hard links into the store + manifest.json
    <root>/envs/<id>/              a release's offline Python environment, when it ships wheels
    <root>/state.json, trial.json, committed, current, previous   what runs: sdk/store/activation.py
    <root>/deploy.lock, lease.json, lease.token                  the deploy lease: sdk/store/lease.py

Objects and release folders are built under temporary names and renamed into place once complete
and fsynced, so a link never names an incomplete release, whatever moment a crash comes at.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import shutil
import stat as statmod
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sdk.durable import fsync_dir, open_new
from sdk.errors import ReleaseError
from sdk.procinfo import LockBusy, flock_within
from sdk.release import MANIFEST, RELEASE_ID, SIGNATURE, ReleaseManifest, sha256_of
from sdk.store.activation import TMP_PREFIX, UPLOAD_PREFIX, Activation
from sdk.store.faults import point
from sdk.store.lease import LeaseHolder
from sdk.store.lease import acquire as acquire_lease
from sdk.store.prune import Pruning
from sdk.store.status import StoreStatus
from sdk.store.trust import check_signature
from sdk.store.verify import read_text

RUN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
MUTEX_FILE = ".lock"  # the store's mutex: held for one step (a switch, a commit, an install), never for a deploy
LOCK_WAIT_S = 120.0  # the longest a step waits for the mutex (an environment build holds it longest)


StoreBusy = LockBusy  # the store's mutex stayed held past its wait (sdk/procinfo.py)


class ReleaseStore(Activation, Pruning, StoreStatus):
    """Objects, releases and their environments; what runs is in Activation (sdk/store/activation.py), pruning in
    sdk/store/prune.py, what `status` says in sdk/store/status.py."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.objects = self.root / "store"
        self.releases = self.root / "releases"

    def ensure(self) -> None:
        for folder in (self.root, self.objects, self.releases):
            folder.mkdir(parents=True, exist_ok=True)

    @contextmanager
    def locked(self, wait_s: float = LOCK_WAIT_S) -> Iterator[None]:
        """The store's mutex: one step at a time, never interleaved. A wait longer than `wait_s` (a process stuck
        while holding it) is a StoreBusy naming the holder, never a wait without end."""
        self.ensure()
        with (self.root / MUTEX_FILE).open("a") as handle:
            flock_within(handle.fileno(), self.root / MUTEX_FILE, wait_s, f"the release store at {self.root}")
            try:
                yield
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

    # Deploy lock ----------------------------------------------------------------------------
    def acquire(self, owner: str, *, wait_s: float = 0.0, lease_s: float = 30.0) -> LeaseHolder:
        """The deploy lock and its lease (sdk/store/lease.py), or a ReleaseError naming who holds it."""
        self.ensure()
        return acquire_lease(self.root, owner, wait_s=wait_s, lease_s=lease_s)

    # Runs ---------------------------------------------------------------------------------
    def run_dir(self, name: str) -> Path:
        if not RUN_NAME.match(name):
            raise ReleaseError(f"invalid run name {name!r}")
        return self.root / "runs" / name

    def clear_run(self, name: str) -> None:
        shutil.rmtree(self.run_dir(name), ignore_errors=True)

    # Objects ------------------------------------------------------------------------------
    def object_path(self, sha256: str) -> Path:
        if len(sha256) != 64 or any(c not in "0123456789abcdef" for c in sha256):
            raise ReleaseError(f"invalid object name {sha256!r}")
        return self.objects / sha256

    def has_object(self, sha256: str, size: int, *, verify: bool = False) -> bool:
        """Whether the store holds the object; with `verify`, a damaged one is removed and reported absent. Only a
        regular file counts: a link or a FIFO planted in its place is never followed or opened for reading
        (which would hang while the store's mutex is held), and is removed like a damaged object."""
        path = self.object_path(sha256)
        try:
            st = os.lstat(path)
            if not statmod.S_ISREG(st.st_mode) or st.st_size != size:
                raise ValueError
            if verify and _object_sha256(path) != sha256:
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

    def upload_path(self, sha256: str) -> Path:
        """Where a remote upload writes an object; the same name on every try, so it can resume."""
        return self.objects / f"{UPLOAD_PREFIX}{self.object_path(sha256).name}"

    def install_object(self, temporary: Path, sha256: str) -> None:
        """Verify the written bytes, fsync, make read-only, rename into the store.

        Whatever fails, the temporary is removed (a partial or unsyncable upload is never kept)."""
        try:
            actual = sha256_of(temporary)
        except FileNotFoundError:
            raise ReleaseError(f"object {sha256[:12]} was never uploaded (no {temporary.name} in the store)") from None
        if actual != sha256:
            temporary.unlink(missing_ok=True)
            raise ReleaseError(f"object {sha256[:12]} arrived corrupt (got {actual[:12]}); that upload was discarded")
        try:
            with temporary.open("rb") as handle:
                os.fsync(handle.fileno())  # a full disk can surface here (delayed allocation, network filesystems)
            temporary.chmod(0o444)
            os.replace(temporary, self.object_path(sha256))
        except OSError as exc:
            temporary.unlink(missing_ok=True)
            raise ReleaseError(f"object {sha256[:12]} could not be stored: {exc.strerror or exc}; that upload was discarded") from None
        fsync_dir(self.objects)
        point("store.object-installed")

    def add_file(self, source: Path, sha256: str) -> None:
        """Copy a local file into the store (the local target's upload). A failed copy leaves nothing behind:
        an OSError (ENOSPC: a full disk) reaches the caller with the partial copy already removed."""
        temporary = self.temporary_object(sha256)
        try:
            shutil.copyfile(source, temporary)
        except BaseException:
            temporary.unlink(missing_ok=True)
            raise
        self.install_object(temporary, sha256)

    # Releases -----------------------------------------------------------------------------
    def release_dir(self, release_id: str) -> Path:
        if not RELEASE_ID.match(release_id):
            raise ReleaseError(f"invalid release id {release_id!r}")
        return self.releases / release_id

    def has_release(self, manifest: ReleaseManifest) -> bool:
        """The release folder is complete and every file is still a hard link to its store object.

        Objects are verified by hash before a deploy uses them (`has_object(verify=True)`), so a
        link to a verified object needs a stat here, not a second hash of every byte.
        """
        folder = self.release_dir(manifest.release_id)
        try:
            if ReleaseManifest.load(folder).files != manifest.files:
                return False
            for name, entry in manifest.files.items():
                linked, stored = (folder / name).stat(), self.object_path(entry.sha256).stat()
                if (linked.st_ino, linked.st_dev, linked.st_size) != (stored.st_ino, stored.st_dev, entry.size):
                    return False
        except (ReleaseError, OSError):
            return False
        return True

    def assemble(self, manifest: ReleaseManifest, signature: str | None = None) -> Path:
        """Build releases/<id> from store objects (hard links), then rename it into place. A device that
        trusts a verify key refuses a manifest without a valid `signature` first (sdk/store/signing.py)."""
        check_signature(self.root, manifest, signature, stage="install", pipeline=self.pipeline_name(manifest))
        final = self.release_dir(manifest.release_id)
        if self.has_release(manifest):
            if signature is not None and self._read_signature(final) != signature:
                self._write_signature(final, signature)
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
        written = staging / f"{TMP_PREFIX}{MANIFEST}"  # a new file renamed into place: never written through a link
        with written.open("x") as handle:
            handle.write(manifest.to_json())
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(written, staging / MANIFEST)
        if signature is not None:
            self._write_signature(staging, signature)
        for folder in sorted({p.parent for p in staging.rglob("*")}, key=lambda p: len(p.parts), reverse=True):
            fsync_dir(folder)
        if final.exists():  # a damaged folder under the final name: set it aside, never activate it
            os.replace(final, self.releases / f"{TMP_PREFIX}damaged-{manifest.release_id}-{os.getpid()}")
        os.replace(staging, final)
        fsync_dir(self.releases)
        point("store.release-assembled")
        return final

    def _read_signature(self, folder: Path) -> str | None:
        try:
            return read_text(folder / SIGNATURE)
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as exc:  # a link or a FIFO in its place: never followed, never waited on
            raise ReleaseError(f"{folder / SIGNATURE}: cannot be read as a signature ({getattr(exc, 'strerror', None) or exc})") from None

    def _write_signature(self, folder: Path, signature: str) -> None:
        """The manifest's signature beside it (kept for `trial` to check again), written then renamed."""
        temporary = folder / f"{TMP_PREFIX}{SIGNATURE}-{os.getpid()}"
        with open_new(temporary) as handle:
            handle.write(signature)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, folder / SIGNATURE)
        fsync_dir(folder)

    def verify_signature(self, release_id: str, stage: str = "trial") -> str | None:
        """`check_signature` of an assembled release (its manifest and the signature kept beside it) at `stage`."""
        folder = self._require_assembled(release_id)
        manifest = ReleaseManifest.load(folder)
        return check_signature(self.root, manifest, self._read_signature(folder), stage=stage, pipeline=self.pipeline_name(manifest, folder))

    def pipeline_name(self, manifest: ReleaseManifest, folder: Path | None = None) -> str | None:
        """The `name:` of a release's pipeline file, read from the release folder or, before it is assembled, from the
        file's store object (without the YAML parser: the device's bare Python); None where neither is there yet."""
        from sdk.release import pipeline_name_of

        entry = manifest.files.get(manifest.pipeline)
        for path in ([folder / manifest.pipeline] if folder is not None else []) + ([self.object_path(entry.sha256)] if entry else []):
            try:
                return pipeline_name_of(read_text(path))
            except (OSError, UnicodeDecodeError):
                continue
        return None

    # Per-release environment ------------------------------------------------------------
    def env_dir(self, release_id: str) -> Path:
        return self.root / "envs" / self.release_dir(release_id).name

    def build_env(self, release_id: str) -> Path | None:
        """The release's offline environment (sdk/store/offline_env.py); its python, or None without wheels."""
        from sdk.store.offline_env import build_env

        return build_env(self.release_dir(release_id), self.env_dir(release_id))

    def partials(self, objects: dict[str, int]) -> dict:
        """The partial uploads a deploy resumes (object -> bytes there), and the bytes freed by removing every other
        one: of an object the release does not need (a cut deploy of another release), or longer than its object."""
        kept, freed = {}, 0
        if not self.objects.is_dir():
            return {"kept": {}, "freed": 0}
        for entry in os.scandir(self.objects):
            sha256 = upload_object(entry.name)
            if sha256 is None or not entry.is_file(follow_symlinks=False):
                continue
            length = entry.stat(follow_symlinks=False).st_size
            if sha256 in objects and length <= objects[sha256]:
                kept[sha256] = length
                continue
            try:
                os.unlink(entry.path)
            except FileNotFoundError:
                continue
            freed += length
        return {"kept": kept, "freed": freed}

    def free_bytes(self) -> int:
        """Bytes an unprivileged writer may still use where the objects go (statvfs f_bavail)."""
        self.ensure()
        return shutil.disk_usage(self.objects).free

    def sweep_temporaries(self, *, keep_uploads: bool = True) -> int:
        """Remove what crashed runs left under temporary names (never reachable from `current`).

        Partial uploads are kept unless asked: the next deploy resumes those of its release and removes
        the others (tools/connect/session_local.py and tools/connect/session_ssh.py, `resume_points`).
        """
        removed = 0
        patterns = [f"{TMP_PREFIX}*"] + ([] if keep_uploads else [f"{UPLOAD_PREFIX}*"])
        for folder, pattern in ((f, p) for f in (self.root, self.objects, self.releases, self.root / "envs") for p in patterns):
            for path in folder.glob(pattern):
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    path.unlink(missing_ok=True)
                removed += 1
        return removed


# Helpers ----------------------------------------------------------------------------------
def _object_sha256(path: Path) -> str:
    """sha256 of a store object, opened without following a link and without blocking on a FIFO; ValueError when
    it is not a regular file."""
    import hashlib

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            raise FileNotFoundError(path) from None
        raise ValueError(str(path)) from None
    with os.fdopen(fd, "rb") as handle:
        if not statmod.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise ValueError(str(path))
        digest = hashlib.sha256()
        while block := handle.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


DISK_FULL = (errno.ENOSPC, errno.EDQUOT)  # the errnos of a full disk (or a user's exhausted quota)


def upload_object(name: str) -> str | None:
    """The object hash a partial upload's file name stands for (`.upload-<sha256>`), else None."""
    return name[len(UPLOAD_PREFIX) :] if name.startswith(UPLOAD_PREFIX) else None


def size_text(size: float) -> str:
    """A byte count for people: 512 bytes, 24.3 kB, 4.2 MB, 1.35 GB (decimal units, as `df -H`)."""
    if size < 1000:
        return f"{size:.0f} bytes"
    for unit, scale in (("kB", 1e3), ("MB", 1e6)):
        if round(size / scale, 1) < 1000:
            return f"{size / scale:.1f} {unit}"
    return f"{size / 1e9:.2f} GB"


def disk_full(target: str, need: float, have: float) -> ReleaseError:
    """The one message for a target without room: before the upload (the space check) or during it (ENOSPC)."""
    return ReleaseError(
        f"disk full on {target}: need {size_text(need)}, have {size_text(have)}",
        hint="the current release is untouched; free space on the target (old releases are pruned after each deploy), then deploy again",
    )
