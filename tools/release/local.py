"""Stage a bundle into a target's release store on this machine: send only what it lacks, then switch."""

from __future__ import annotations

from dataclasses import dataclass

from sdk.release import FileEntry, ReleaseManifest, sha256_of
from sdk.store import ReleaseStore
from tools.progress import Progress, SilentProgress
from tools.release.bundle import Bundle


@dataclass(frozen=True)
class StageResult:
    release_id: str
    files: int
    files_sent: int
    bytes_sent: int
    previous: str | None


def manifest_for(bundle: Bundle) -> ReleaseManifest:
    entries = {name: FileEntry(sha256_of(path), path.stat().st_size) for name, path in bundle.files.items()}
    return ReleaseManifest(entries, bundle.pipeline, bundle.artifacts, bundle.fingerprint)


def stage_release(store: ReleaseStore, bundle: Bundle, progress: Progress | None = None) -> StageResult:
    progress = progress or SilentProgress()
    manifest = manifest_for(bundle)
    with store.locked():
        store.sweep_temporaries()
        missing: dict[str, tuple[str, FileEntry]] = {}
        for name, entry in manifest.files.items():
            if entry.sha256 not in missing and not store.has_object(entry.sha256, entry.size, verify=True):
                missing[entry.sha256] = (name, entry)
        total = sum(entry.size for _, entry in missing.values())
        task = progress.task(f"staging release {manifest.release_id}", total=total or 1)
        for sha256, (name, entry) in missing.items():
            store.add_file(bundle.files[name], sha256)
            task.advance(entry.size)
        task.done()
        previous = store.current()
        store.assemble(manifest)
        store.activate(manifest.release_id)
    return StageResult(manifest.release_id, len(manifest.files), len(missing), total, previous)
