"""The release store on a target (RAUC / Capistrano style), operated where the files live.

    <root>/store/<sha256>          content-addressed, read-only objects
    <root>/releases/<id>/...       one folder per release: hard links into the store + manifest.json
    <root>/current -> releases/<id>
    <root>/previous -> releases/<id>
    <root>/history.json            activated releases, oldest first (rollback walks it back)
    <root>/trial.json              present while a new release is on trial (RAUC's "pending")

Every step is crash-safe: objects and release folders are built under temporary names and
renamed into place once complete and fsynced; `current` is switched by renaming a new
symlink over it (rename(2) is atomic; `ln -sfn` is not). So `current` always names a
complete release, whatever moment a crash or a kill comes at.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sdk.errors import ReleaseError
from sdk.release import MANIFEST, RELEASE_ID, ReleaseManifest, sha256_of

TMP_PREFIX = ".tmp-"
RUN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
UPLOAD_PREFIX = ".upload-"  # kept across crashes: an interrupted upload resumes from its length


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

    # Deploy lock ----------------------------------------------------------------------------
    def acquire(self, owner: str, *, wait_s: float = 0.0):
        """Take the deploy lock for the life of the returned handle, or raise naming who holds it.

        A kernel lock (flock) on `deploy.lock`: it spans a whole deploy and vanishes with the
        process that holds it, so a killed deploy never leaves the target locked. Over SSH the
        holder is a device process kept alive by the host's heartbeats (`store hold-lock`).
        A busy lock is retried for `wait_s` (the lease of a host that vanished runs out meanwhile).
        """
        self.ensure()
        deadline = time.monotonic() + wait_s
        handle = (self.root / "deploy.lock").open("a+")
        while True:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() < deadline:
                    time.sleep(0.2)
                    continue
                handle.seek(0)
                holder = handle.read().strip() or "another deploy"
                handle.close()
                raise ReleaseError(f"the target is busy: {holder} is deploying to it", hint="wait for that deploy to finish") from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"{owner} since {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
        handle.flush()
        return handle

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

    def upload_path(self, sha256: str) -> Path:
        """Where a remote upload writes an object; the same name on every try, so it can resume."""
        return self.objects / f"{UPLOAD_PREFIX}{self.object_path(sha256).name}"

    def install_object(self, temporary: Path, sha256: str) -> None:
        """Verify the written bytes, fsync, make read-only, rename into the store.

        Whatever fails, the temporary is removed (a partial or unsyncable upload is never kept)."""
        actual = sha256_of(temporary)
        if actual != sha256:
            temporary.unlink(missing_ok=True)
            raise ReleaseError(f"object {sha256[:12]} arrived corrupt (got {actual[:12]}); nothing was installed")
        try:
            with temporary.open("rb") as handle:
                os.fsync(handle.fileno())  # a full disk can surface here (delayed allocation, network filesystems)
            temporary.chmod(0o444)
            os.replace(temporary, self.object_path(sha256))
        except OSError as exc:
            temporary.unlink(missing_ok=True)
            raise ReleaseError(f"object {sha256[:12]} could not be stored: {exc.strerror or exc}; nothing was installed") from None
        fsync_dir(self.objects)

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

    # Per-release environment ------------------------------------------------------------
    def env_dir(self, release_id: str) -> Path:
        return self.root / "envs" / self.release_dir(release_id).name

    def build_env(self, release_id: str) -> Path | None:
        """The release's offline environment (sdk/offline_env.py); its python, or None without wheels."""
        from sdk.offline_env import build_env

        return build_env(self, release_id)

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

    def activate(self, release_id: str, *, trial: bool = False) -> None:
        """Point `current` at the release (and `previous` at the one it replaces), atomically.

        With `trial`, the switch is provisional until `commit()`: `recover()` (run before any
        other store operation, also after a crash or power loss) puts the old release back.
        """
        folder = self.release_dir(release_id)
        if not (folder / MANIFEST).is_file():
            raise ReleaseError(f"release {release_id} is not assembled")
        old = self.current()
        if old == release_id:
            return
        if trial:
            self._write_json("trial.json", {"release": release_id, "fallback": old})
        if old is not None:
            self._switch_link("previous", old)
        self._switch_link("current", release_id)
        history = [r for r in self.history() if r != release_id] + [release_id]
        self._write_json("history.json", history)

    def commit(self) -> None:
        """The release on trial passed its health check: it stays."""
        (self.root / "trial.json").unlink(missing_ok=True)
        fsync_dir(self.root)

    def trial(self) -> dict | None:
        return self._read_json("trial.json")

    def recover(self) -> str | None:
        """Undo an uncommitted trial; returns the release that was rolled back, if any."""
        trial = self.trial()
        if trial is None:
            return None
        failed, fallback = trial.get("release"), trial.get("fallback")
        if self.current() == failed:
            if fallback:
                self._switch_link("current", fallback)
            else:
                (self.root / "current").unlink(missing_ok=True)
        history = [r for r in self.history() if r != failed]
        self._write_json("history.json", history)
        if len(history) >= 2:
            self._switch_link("previous", history[-2])
        else:
            (self.root / "previous").unlink(missing_ok=True)
        self.commit()
        return failed

    def rollback(self) -> str:
        """Go back one release in the activation history; returns the release now current."""
        history = self.history()
        if len(history) < 2 or self.current() != history[-1]:
            raise ReleaseError("there is no earlier release to go back to", hint="deploy a release first")
        back = history[-2]
        if not (self.release_dir(back) / MANIFEST).is_file():
            raise ReleaseError(f"the earlier release {back} is no longer on the target")
        self._switch_link("current", back)
        history = history[:-1]
        self._write_json("history.json", history)
        if len(history) >= 2:
            self._switch_link("previous", history[-2])
        else:
            (self.root / "previous").unlink(missing_ok=True)
        return back

    def history(self) -> list[str]:
        history = self._read_json("history.json") or []
        return [r for r in history if isinstance(r, str) and RELEASE_ID.match(r)]

    def prune(self, keep: int = 3) -> list[str]:
        """Remove releases beyond the newest `keep` of the history (never current or previous),
        then store objects no remaining release links to."""
        keep_ids = set(self.history()[-keep:]) | {self.current(), self.previous()}
        trial = self.trial()
        if trial:
            keep_ids |= {trial.get("release"), trial.get("fallback")}
        removed = []
        for folder in self.releases.iterdir():
            if folder.name.startswith(TMP_PREFIX) or folder.name in keep_ids:
                continue
            shutil.rmtree(folder)
            removed.append(folder.name)
        used = {os.stat(p).st_ino for folder in self.releases.iterdir() for p in folder.rglob("*") if p.is_file()}
        for obj in self.objects.iterdir():
            if obj.name.startswith(UPLOAD_PREFIX) or (not obj.name.startswith(TMP_PREFIX) and obj.stat().st_ino not in used):
                obj.unlink()
        for env in (self.root / "envs").glob("*") if (self.root / "envs").is_dir() else ():
            if env.name not in keep_ids:
                shutil.rmtree(env, ignore_errors=True)
        self._write_json("history.json", [r for r in self.history() if r not in removed])
        return removed

    def free_bytes(self) -> int:
        """Bytes an unprivileged writer may still use where the objects go (statvfs f_bavail)."""
        self.ensure()
        return shutil.disk_usage(self.objects).free

    def status(self) -> dict:
        folders = self.releases.iterdir() if self.releases.is_dir() else ()
        releases = sorted(p.name for p in folders if not p.name.startswith(TMP_PREFIX))
        return {
            "current": self.current(),
            "previous": self.previous(),
            "trial": self.trial(),
            "history": self.history(),
            "releases": releases,
        }

    def _write_json(self, name: str, value: object) -> None:
        temporary = self.root / f"{TMP_PREFIX}{name}-{os.getpid()}"
        with temporary.open("w") as handle:
            json.dump(value, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, self.root / name)
        fsync_dir(self.root)

    def _read_json(self, name: str):
        try:
            return json.loads((self.root / name).read_text())
        except (FileNotFoundError, ValueError):
            return None

    def _switch_link(self, name: str, release_id: str) -> None:
        temporary = self.root / f"{TMP_PREFIX}{name}-{os.getpid()}"
        temporary.unlink(missing_ok=True)
        os.symlink(f"releases/{release_id}", temporary)
        os.replace(temporary, self.root / name)
        fsync_dir(self.root)

    def sweep_temporaries(self, *, keep_uploads: bool = True) -> int:
        """Remove what crashed runs left under temporary names (never reachable from `current`).

        Partial uploads are kept unless asked: the next deploy resumes those of its release and removes
        the others (tools/sessions.py, `resume_points`).
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
