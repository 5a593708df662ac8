"""The release a validation judges: the one current on the target, and only where it runs this very pipeline file.

Before anything runs or any file is written, the current release's manifest is read and its pipeline's sha256
compared with the file's; after the run, the report's hash is checked again (what really ran).
"""

from __future__ import annotations

import yaml

from sdk.errors import TargetError
from sdk.release import MANIFEST, ReleaseManifest, sha256_of
from sdk.spec.loader import PipelineFile
from tools.release.stage import StageResult


def current_release(session) -> StageResult:
    """The release that is current on the target, as the deploy flow would describe it (nothing is sent)."""
    current = session.status().get("committed")  # the release that passed its health check (a trial is not validated)
    if current is None:
        raise TargetError(f"no release is current on {session.name}", hint=f"deploy one first: deploy --target {session.name} PIPELINE")
    return StageResult(current, 0, 0, 0, current, None, device=session.probe(), python=session.env(current))


def _release_file(session, release_id: str, name: str) -> bytes:
    """One file of a release on the target, read without running anything there."""
    store = getattr(session, "store", None)
    if store is not None:  # local: the store is on this machine
        return (store.release_dir(release_id) / name).read_bytes()
    with session.connection.sftp().open(f"{session.root}/releases/{release_id}/{name}", "rb") as handle:  # a vehicle: SFTP
        return handle.read()


def require_current(session, pipeline: PipelineFile) -> str:
    """Refuse (TargetError) unless the target's current release runs this very pipeline file, saying which
    pipeline and release are current. Reads the release's manifest: nothing runs, nothing is written."""
    from tools.release.bundle import runtime_files

    session.ensure_agent(runtime_files())
    current = session.status().get("committed")  # the release that passed its health check
    mine = sha256_of(pipeline.path)
    if current is None:
        raise TargetError(
            f"no release is current on {session.name}: there is nothing to validate {pipeline.path.name} against",
            hint=f"deploy one first: deploy --target {session.name} {pipeline.path}, or validate with --deploy",
        )
    try:
        manifest = ReleaseManifest.from_json(_release_file(session, current, MANIFEST).decode(), where=f"{session.name}: release {current}")
        entry = manifest.files[manifest.pipeline]
        name = (yaml.safe_load(_release_file(session, current, manifest.pipeline)) or {}).get("name")
    except (OSError, KeyError, ValueError, AttributeError, yaml.YAMLError) as exc:
        raise TargetError(
            f"cannot read the pipeline of release {current} on {session.name}: {exc}",
            hint=f"deploy again: deploy --target {session.name} {pipeline.path}",
        ) from None
    if entry.sha256 != mine:
        raise TargetError(
            f"the current release on {session.name} is {current}, which runs another version of {pipeline.path.name}: "
            f"pipeline {name!r} ({manifest.pipeline}, sha256 {entry.sha256[:12]}); this file is pipeline {pipeline.spec.name!r} "
            f"(sha256 {mine[:12]}). Its verdict would judge the wrong budgets; nothing was run and no report was written",
            hint=f"deploy this file first (deploy --target {session.name} {pipeline.path}), or validate with --deploy",
        )
    return current


def require_same_pipeline(report: dict, pipeline: PipelineFile, target: str) -> None:
    """After the run, the same check on what really ran (the report's hash)."""
    ran = (report.get("hashes") or {}).get("pipeline_sha256")
    if ran != sha256_of(pipeline.path):
        raise TargetError(
            f"the current release on {target} ({report.get('release')}) runs another version of {pipeline.path.name} "
            f"(sha256 {str(ran)[:12]}, this file {sha256_of(pipeline.path)[:12]}): its verdict would judge the wrong budgets",
            hint=f"deploy this file first (deploy --target {target} {pipeline.path}), or validate with --deploy",
        )


__all__ = ["current_release", "require_current", "require_same_pipeline"]
