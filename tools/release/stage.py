"""Stage a release on a target: send only the objects it lacks (after checking the space), assemble."""

from __future__ import annotations

from dataclasses import dataclass, field

from sdk.errors import ReleaseError
from sdk.release import FileEntry, ReleaseManifest, sha256_of
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


def manifest_for(bundle: Bundle) -> ReleaseManifest:
    entries = {name: FileEntry(sha256_of(path), path.stat().st_size) for name, path in bundle.files.items()}
    return ReleaseManifest(entries, bundle.pipeline, bundle.artifacts, bundle.fingerprint)


def stage_release(session, bundle: Bundle, manifest: ReleaseManifest, progress: Progress | None = None) -> StageResult:
    """Call with the target's deploy lock held."""
    progress = progress or SilentProgress()
    status = session.prepare()  # sweeps crash leftovers, rolls back an unfinished trial
    objects = {entry.sha256: entry.size for entry in manifest.files.values()}
    present = session.present(objects)
    missing = {sha: size for sha, size in objects.items() if sha not in present}
    need = sum(missing.values())
    free = status.get("free_bytes")
    if free is not None and need * SPACE_MARGIN > free:
        raise ReleaseError(
            f"{session.name}: not enough space for release {manifest.release_id}: need {need / 1e6:.1f} MB, have {free / 1e6:.1f} MB",
            hint="free space on the target (old releases are pruned after each deploy); nothing was changed",
        )
    source_of = {entry.sha256: bundle.files[name] for name, entry in manifest.files.items()}
    task = progress.task(f"sending release {manifest.release_id} to {session.name}", total=need or 1)
    sent = session.upload({sha: (size, source_of[sha]) for sha, size in missing.items()}, task)
    task.done()
    session.assemble(manifest)
    return StageResult(manifest.release_id, len(manifest.files), len(missing), sent, status.get("current"), status.get("recovered"))
