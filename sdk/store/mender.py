"""The Mender Update Module `perception-release` (protocol v3): Mender's states mapped onto the release store.

Mender runs `/usr/share/mender/modules/v3/perception-release STATE FILES_DIR` once per state, each
time a new process. The states drive the very code an SSH deploy drives over `python -m sdk store`:

    Download          the artifact's streams go into the store's objects, each verified against the SDK
                      manifest (the first stream) and the device's verify key when it trusts one;
                      objects the store already holds are not written again
    ArtifactInstall   assemble the release, build its offline environment, then the device-owned trial
                      (`run_trial`: switch, health check under its deadline, a pass recorded or a
                      rollback); a failed health check exits 1, so Mender runs ArtifactRollback and
                      ArtifactFailure, and the previous release is current again
    ArtifactCommit    commit the release on trial (then prune old releases, as a deploy does)
    ArtifactRollback  abort this deployment's trial, or go back to the previous committed release when
                      this deployment had already committed it
    ArtifactFailure   abort this deployment's trial if one is left
    SupportsRollback  Yes;  NeedsArtifactReboot  No;  Cleanup  nothing (Mender removes FILES_DIR)

Each state holds the deploy lock while it works, so an SSH deploy and a Mender deployment never
interleave. The trial spans invocations: its owner is `mender` (sdk/store/activation.py, MENDER_OWNER), it has
no lease, and it lives until its deadline (`commit_window_s` after the pass) or the next boot.

The store is named in /etc/mender/perception-release.conf (JSON): {"root": "/data/perception",
"target": "mender", "commit_window_s": 3600, "lock_wait_s": 60}. Only `root` is required.
Standard library only: this runs on the device's Python before any release environment exists.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

CONFIG_FILE = Path("/etc/mender/perception-release.conf")
PAYLOAD_TYPE = "perception-release"
META_KEY = "perception_release"  # the artifact's meta-data: {"perception_release": {"release": ..., ...}}
MANIFEST_STREAM = "manifest.json"
SIGNATURE_STREAM = "manifest.json.sig"
LEASE_S = 86400.0  # the lock is what excludes a deploy; nothing renews this lease, its process ending ends it
CHUNK = 1 << 20


@dataclass(frozen=True)
class ModuleConfig:
    root: Path
    target: str = "mender"
    commit_window_s: float = 3600.0
    lock_wait_s: float = 60.0

    @classmethod
    def load(cls, path: Path = CONFIG_FILE) -> ModuleConfig:
        from sdk.errors import ConfigError

        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            raise ConfigError(
                f"{path} is missing: the update module does not know where the release store is", hint='write {"root": "/path/to/store"} there'
            ) from None
        except (OSError, ValueError) as exc:
            raise ConfigError(f"{path}: not a readable JSON file: {exc}") from None
        if not isinstance(data, dict) or not isinstance(data.get("root"), str) or not data["root"].startswith("/"):
            raise ConfigError(f"{path}: `root` must be the absolute path of the release store")
        try:
            return cls(
                Path(data["root"]), str(data.get("target", "mender")), float(data.get("commit_window_s", 3600)), float(data.get("lock_wait_s", 60))
            )
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{path}: {exc}") from None


@dataclass(frozen=True)
class Payload:
    """What the artifact says about its release (header/meta-data, covered by the artifact's signature)."""

    release: str
    pipeline: str
    min_frames: int
    timeout_s: float
    if_damaged: str | None = None  # the pipeline's service.if_damaged (absent from artifacts of earlier SDKs)

    @classmethod
    def read(cls, files: Path) -> Payload:
        from sdk.errors import ReleaseError
        from sdk.store.activation import IF_DAMAGED

        try:
            meta = json.loads((files / "header" / "meta-data").read_text())[META_KEY]
            if_damaged = meta.get("if_damaged")
            if if_damaged is not None and if_damaged not in IF_DAMAGED:
                raise ValueError(f"if_damaged {if_damaged!r} is not one of {', '.join(IF_DAMAGED)}")
            return cls(str(meta["release"]), str(meta["pipeline"]), int(meta["min_frames"]), float(meta["timeout_s"]), if_damaged)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ReleaseError(f"the artifact's meta-data has no valid {META_KEY!r} block ({exc}): it was not made by `sdk export`") from None


def signed_health(store, release: str, payload: Payload):
    """The health check a Mender trial runs: the one the release's own pipeline file states (`health:`, covered by the
    SDK's signature through the manifest), never less. The artifact's meta-data (outside that signature) must agree: as
    many frames or more (a target file may raise the minimum), the same deadline; otherwise the artifact is refused."""
    from sdk.errors import ReleaseError
    from sdk.release import pipeline_health_of
    from sdk.store.trial import HealthPolicy
    from sdk.store.verify import check_file, load_manifest, read_regular

    folder = store.release_dir(release)
    manifest = load_manifest(folder)
    entry = manifest.files[manifest.pipeline]
    problem = check_file(folder / manifest.pipeline, entry.size, entry.sha256)
    if problem:
        raise ReleaseError(f"release {release}: {manifest.pipeline} {problem}")
    try:
        stated = pipeline_health_of(read_regular(folder / manifest.pipeline).decode())
        signed = HealthPolicy(**{"min_frames": HealthPolicy.min_frames, "timeout_s": HealthPolicy.timeout_s, **stated})
    except (ValueError, TypeError, UnicodeDecodeError) as exc:
        raise ReleaseError(f"release {release}: the health: block of {manifest.pipeline} cannot be read ({exc})") from None
    if payload.min_frames < signed.min_frames or payload.timeout_s != float(signed.timeout_s):
        raise ReleaseError(
            f"the artifact's meta-data asks for a health check of {payload.min_frames} frames within {payload.timeout_s:g} s; "
            f"the release's signed pipeline states {signed.min_frames} frames within {float(signed.timeout_s):g} s: refused "
            "(the SDK's signature does not cover the meta-data)",
            hint="export the artifact again with `sdk export`",
        )
    return HealthPolicy(min_frames=payload.min_frames, timeout_s=float(signed.timeout_s))


def _say(line: str) -> None:
    sys.stderr.write(f"perception-release: {line}\n")
    sys.stderr.flush()


class Module:
    def __init__(self, files: Path, config: ModuleConfig) -> None:
        from sdk.store.objects import ReleaseStore

        self.files = files
        self.config = config
        self.store = ReleaseStore(config.root)
        self.payload = Payload.read(files)
        self.saved = files / "tmp"  # kept by Mender from Download to Cleanup, across invocations

    # Saved between states ------------------------------------------------------------------
    def _manifest(self):
        from sdk.errors import ReleaseError
        from sdk.release import ReleaseManifest

        try:
            text = (self.saved / MANIFEST_STREAM).read_text()
        except FileNotFoundError:
            raise ReleaseError("the release manifest saved at Download is missing") from None
        manifest = ReleaseManifest.from_json(text, where=f"artifact {MANIFEST_STREAM}")
        signature = self._read(SIGNATURE_STREAM)
        return manifest, signature

    def _read(self, name: str) -> str | None:
        try:
            return (self.saved / name).read_text()
        except FileNotFoundError:
            return None

    def _note(self, **values) -> None:
        notes = {**self._notes(), **values}
        (self.saved / "notes.json").write_text(json.dumps(notes))

    def _notes(self) -> dict:
        try:
            return json.loads((self.saved / "notes.json").read_text())
        except (FileNotFoundError, ValueError):
            return {}

    def _lease(self, state: str):
        return self.store.acquire(f"mender {state} of release {self.payload.release}", wait_s=self.config.lock_wait_s, lease_s=LEASE_S)

    # States ----------------------------------------------------------------------------------
    def download(self) -> None:
        """Stream each payload file into the store; nothing becomes a release here (that is ArtifactInstall)."""
        from sdk.errors import ReleaseError
        from sdk.release import ReleaseManifest
        from sdk.store.objects import disk_full
        from sdk.store.trust import check_signature

        self.saved.mkdir(exist_ok=True)
        holder = self._lease("Download")
        try:
            manifest, signature, checked, seen = None, None, False, set()
            for name in self._streams():
                stream = self.files / name
                base = Path(name).name
                if base == MANIFEST_STREAM and manifest is None:
                    text = stream.read_bytes().decode()
                    manifest = ReleaseManifest.from_json(text, where=f"artifact {MANIFEST_STREAM}")
                    if manifest.release_id != self.payload.release:
                        raise ReleaseError(f"the artifact's manifest is release {manifest.release_id}, its meta-data names {self.payload.release}")
                    (self.saved / MANIFEST_STREAM).write_text(text)
                    continue
                if base == SIGNATURE_STREAM and manifest is not None and not checked:
                    signature = stream.read_bytes().decode()
                    (self.saved / SIGNATURE_STREAM).write_text(signature)
                    continue
                if manifest is None:
                    raise ReleaseError(f"the artifact's first payload file must be {MANIFEST_STREAM}, not {base}")
                objects = {entry.sha256: entry.size for entry in manifest.files.values()}
                if not checked:  # before the first object touches the disk
                    with self.store.locked():
                        check_signature(self.store.root, manifest, signature)
                        self.store.ensure()
                        need = sum(size for sha, size in objects.items() if not self.store.has_object(sha, size, verify=True))
                        free = self.store.free_bytes()
                    if need * 1.05 > free:
                        raise disk_full(self.config.target, need * 1.05, free)
                    checked = True
                if base not in objects or base in seen:
                    raise ReleaseError(f"payload file {base} is no object of release {manifest.release_id}'s manifest")
                seen.add(base)
                self._store_object(stream, base, objects[base])
            if manifest is None:
                raise ReleaseError(f"the artifact carries no {MANIFEST_STREAM}")
            if not checked:
                with self.store.locked():
                    check_signature(self.store.root, manifest, signature)
            missing = [name for name, entry in manifest.files.items() if not self.store.has_object(entry.sha256, entry.size)]
            if missing:
                raise ReleaseError(f"release {manifest.release_id}: the artifact lacks {len(missing)} file(s) of its manifest, e.g. {missing[0]}")
        finally:
            holder.end()

    def _streams(self):
        """The payload's streams, in the order Mender serves them (`stream-next` answers an empty line at the end)."""
        while True:
            name = (self.files / "stream-next").read_text().strip()
            if not name:
                return
            if name.startswith("/") or ".." in Path(name).parts:
                from sdk.errors import ReleaseError

                raise ReleaseError(f"Mender named a stream outside its folder: {name!r}")
            yield name

    def _store_object(self, stream: Path, sha256: str, size: int) -> None:
        """Write one stream into the store (verified by its hash, then renamed into place), or drain it when the
        store already holds that object intact."""
        from sdk.errors import ReleaseError

        present = self.store.has_object(sha256, size, verify=True)
        temporary = None if present else self.store.temporary_object(sha256)
        written = 0
        try:
            from sdk.durable import open_new

            with stream.open("rb") as source, open_new(temporary, "wb", 0o600) if temporary else open(os.devnull, "wb") as target:
                while block := source.read(CHUNK):
                    written += len(block)
                    if written > size:
                        raise ReleaseError(f"object {sha256[:12]} is longer in the artifact than in its manifest ({size} bytes)")
                    target.write(block)
            if temporary is not None:
                with self.store.locked():
                    self.store.install_object(temporary, sha256)  # checks the hash; removes the temporary when it fails
        except BaseException:
            if temporary is not None:
                temporary.unlink(missing_ok=True)
            raise

    def install(self) -> int:
        from sdk.store.trial import run_trial

        manifest, signature = self._manifest()
        release = manifest.release_id
        holder = self._lease("ArtifactInstall")
        try:
            with self.store.locked():
                self.store.recover()
                self.store.assemble(manifest, signature)  # checks the signature again when the device trusts a key
                if self.store.committed() == release and self.store.trial() is None:
                    self._note(already_committed=True)
                    _say(f"release {release} is already the committed release; nothing to try")
                    return 0
                python = self._build_env(release)  # the release's offline environment, when it ships wheels
            policy = signed_health(self.store, release, self.payload)  # the release's own health: block; the meta-data must agree
            outcome = run_trial_quietly(
                run_trial, self.store, release, target=self.config.target, policy=policy, commit_within_s=self.config.commit_window_s
            )
        finally:
            holder.end()
        if not outcome["healthy"]:
            _say(
                f"error: release {release} failed its health check: {outcome['reason']}; "
                f"the device rolled back to {outcome['current'] or 'no release'}"
            )
            return 1
        self._note(trial=release, python=str(python) if python else None)
        _say(f"release {release} passed its health check ({outcome['reason']}); it runs on trial until ArtifactCommit")
        return 0

    def _build_env(self, release: str):
        """The release's offline environment: built by root in a store of root's; in a store the deploy login owns,
        built by a child running as that login (root never runs or writes its files: the environment's
        interpreter then runs the health check as that login too, sdk/store/trial.py)."""
        from sdk.errors import ReleaseError
        from sdk.rootsafe import as_user, runs_as

        ids = runs_as(self.store.root)
        if ids is None:
            return self.store.build_env(release)
        if as_user(ids, lambda: self.store.build_env(release)) != 0:
            raise ReleaseError(f"release {release}: its offline environment could not be built (as the store's owner, uid {ids[0]})")
        python = self.store.env_dir(release) / "bin" / "python"
        return python if python.exists() else None

    def commit(self) -> int:
        from sdk.store.activation import MENDER_OWNER

        release = self.payload.release
        if self._notes().get("already_committed"):
            return 0
        holder = self._lease("ArtifactCommit")
        try:
            with self.store.locked():
                self.store.recover()  # a trial past its deadline or from an earlier boot is rolled back first
                trial = self.store.trial()
                if trial is None or trial.get("release") != release or trial.get("owner") != MENDER_OWNER:
                    last = self.store.status()["last_trial"] or {}
                    why = f": {last.get('reason')}" if last.get("release") == release and last.get("reason") else ""
                    _say(f"error: release {release} is not on trial on this device any more (it was rolled back{why}); nothing to commit")
                    return 1
                fallback = trial.get("fallback")
                self.store.commit(token=None, if_damaged=self.payload.if_damaged)
                _advance_root_floor(self.store.release_dir(release))
                self._note(committed=release, fallback=fallback)
                self.store.prune()
        finally:
            holder.end()
        _say(f"release {release} is the committed release")
        return 0

    def rollback(self, state: str) -> int:
        """ArtifactRollback and ArtifactFailure: whatever this deployment started is undone (idempotent)."""
        from sdk.store.activation import MENDER_OWNER

        release = self.payload.release
        holder = self._lease(state)
        try:
            with self.store.locked():
                trial = self.store.trial()
                if trial is not None and trial.get("release") == release and trial.get("owner") == MENDER_OWNER:
                    self.store.abort_trial(f"Mender rolled the deployment back ({state})", token=None)
                    _say(f"release {release} rolled back; {self.store.committed() or 'no release'} is current")
                    return 0
                self.store.recover()
                notes = self._notes()
                if state == "ArtifactRollback" and notes.get("committed") == release and self.store.committed() == release:
                    back = self.store.rollback()
                    self._note(committed=None)
                    _say(f"release {release} was committed by this deployment; went back to {back}")
        finally:
            holder.end()
        return 0


def _advance_root_floor(folder: Path) -> None:
    """The committed release's signed version becomes root's floor for its pipeline (this module runs as root)."""
    from sdk.store.trust import advance_root_floor, statement_of

    statement = statement_of(folder) or {}
    if isinstance(statement.get("version"), int) and isinstance(statement.get("pipeline"), str):
        advance_root_floor(statement["pipeline"], statement["version"])


def run_trial_quietly(run_trial, store, release: str, *, target: str, policy, commit_within_s: float) -> dict:
    """`run_trial` as Mender's owner; its progress lines (meant for a deploy's host) go to stderr, Mender's log."""
    from sdk.store.activation import MENDER_OWNER

    stdout = sys.stdout
    sys.stdout = sys.stderr
    try:
        return run_trial(store, release, token=None, owner=MENDER_OWNER, target=target, policy=policy, commit_within_s=commit_within_s)
    finally:
        sys.stdout = stdout


def main(argv: list[str], config_file: Path = CONFIG_FILE) -> int:
    state = argv[0] if argv else ""
    if state == "SupportsRollback":
        print("Yes")
        return 0
    if state == "NeedsArtifactReboot":
        print("No")
        return 0
    if state not in ("Download", "ArtifactInstall", "ArtifactCommit", "ArtifactRollback", "ArtifactFailure") or len(argv) < 2:
        return 0  # Cleanup, and any state or query a later protocol adds: nothing to do, say nothing
    from sdk.errors import SdkError

    try:
        module = Module(Path(argv[1]), ModuleConfig.load(config_file))
        if state == "Download":
            module.download()
            return 0
        if state == "ArtifactInstall":
            return module.install()
        if state == "ArtifactCommit":
            return module.commit()
        return module.rollback(state)
    except SdkError as exc:
        _say(f"error: {exc.message}")
        _say(f"hint: {exc.hint}")
        return 1
    except OSError as exc:
        _say(f"error: {state} failed: {exc.strerror or exc} ({exc.filename or '-'})")
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
