"""Stage a release on a target: send only the objects it lacks (after checking the space), assemble."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path

from sdk.release import FileEntry, ReleaseManifest, sha256_of
from sdk.store.objects import disk_full
from tools.progress import Progress, SilentProgress
from tools.release.bundle import Bundle

SPACE_MARGIN = 1.05  # the release folder's hard links and the manifest need a little beyond the objects


@dataclass(frozen=True)
class StageResult:
    release_id: str
    files: int
    files_sent: int
    bytes_sent: int  # file bytes that crossed to the target (a resumed upload sends only its rest)
    previous: str | None  # what was current before this deploy
    recovered: str | None  # an unfinished trial this deploy rolled back first
    device: dict = field(default_factory=dict)  # the target's fingerprint, probed by this deploy
    python: str | None = None  # the release's offline environment on the target, when it ships wheels
    service_unit: dict | None = None  # `sdk service unit`'s answer: the unit rendered at the commit, its user, the root step


_HASHES: dict[tuple, str] = {}
_HASHES_LOCK = threading.Lock()


def hashed(path: Path) -> FileEntry:
    """A file's entry, hashed once per process while it is unchanged: a fleet deploy hashes its release once,
    not once per target (the targets' bundles share all but their device-specific files)."""
    info = path.stat()
    key = (str(path), info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)
    with _HASHES_LOCK:
        known = _HASHES.get(key)
    if known is None:
        known = sha256_of(path)
        with _HASHES_LOCK:
            _HASHES[key] = known
    return FileEntry(known, info.st_size)


def manifest_for(bundle: Bundle) -> ReleaseManifest:
    entries = {name: hashed(path) for name, path in bundle.files.items()}
    return ReleaseManifest(entries, bundle.pipeline, bundle.artifacts, bundle.fingerprint)


def stage_release(session, bundle: Bundle, manifest: ReleaseManifest, progress: Progress | None = None, signature: str | None = None) -> StageResult:
    """Call with the target's deploy lock held. `signature`: manifest.json.sig's text, for a device that checks it."""
    progress = progress or SilentProgress()
    status = session.prepare()  # sweeps crash leftovers, rolls back an unfinished trial
    objects = {entry.sha256: entry.size for entry in manifest.files.values()}
    present = session.present(objects)
    missing = {sha: size for sha, size in objects.items() if sha not in present}
    # Partial uploads of these objects resume; any other (another release's, cut off earlier) is removed first.
    resumed, freed = session.resume_points(missing)
    need = sum(size - resumed.get(sha, 0) for sha, size in missing.items())  # only the bytes still to send
    free = status.get("free_bytes")
    if free is not None and need * SPACE_MARGIN > free + freed:
        raise disk_full(session.name, need * SPACE_MARGIN, free + freed)
    source_of = {entry.sha256: bundle.files[name] for name, entry in manifest.files.items()}
    task = progress.task(f"sending release {manifest.release_id} to {session.name}", total=sum(missing.values()) or 1)
    sent = session.upload({sha: (size, source_of[sha]) for sha, size in missing.items()}, task)
    task.done()
    session.assemble(manifest, signature)
    return StageResult(manifest.release_id, len(manifest.files), len(missing), sent, status.get("current"), status.get("recovered"))
