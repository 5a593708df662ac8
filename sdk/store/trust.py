"""The device's trust policy, and the check of a signed release against it at install, trial and every start.

Where the policy lives (decision 0310):

- **Root's policy**, `/etc/perception/trust/policy.json`, installed by the one root step. The deploy login and
  the service can read it, never change it (the folder and the file must be root's and writable by root alone;
  otherwise nothing is accepted). It names the trusted keys (each with a name and an optional expiry), revoked
  key fingerprints, whether signatures are required (default: yes), the device's identity (device type, target
  name) and release-version floors per pipeline.
- **The store's trust folder**, `<root>/trust/` (devices without the root step): keys installed with
  `sdk targets trust-key` (`keys/*.pub`; `verify_key.pub` of earlier SDKs), the identity the host recorded, and
  the statements that rotated or revoked keys. Once any key has been trusted, state.json records it and
  signatures stay required: a deleted key file refuses everything, it never turns verification off. Whoever can
  write the store (the deploy login) can change this level: use root's policy against a stolen deploy login.

A key is added after the first only by a statement signed by a currently trusted key (a rotation), and removed
by a revocation signed by one; each names the device and a sequence number (`statement_problem`); both are kept in
`<root>/trust/statements.json` and replayed, checked, at every load. On top of root's policy they can add keys the
root keys vouched for; they cannot lift root's revocations.

What a release's signature (`manifest.json.sig`, written by the host, sdk/store/signing.py) states and is checked for:
the manifest (every file's hash), an always-increasing `version` per pipeline, the `pipeline`'s name, the
`device_type` and the `targets` it is for. A release older than the newest version committed for its pipeline
(the floor: the store's in state.json, root's in its policy and floors.json) is refused at install, trial, start and
fallback; `sdk rollback` may go below the store's floor, never below root's (sdk/store/floors.py). Standard library
only: this runs on the device's bare Python.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from sdk.errors import ReleaseError
from sdk.release import SIGNATURE
from sdk.store.floors import FLOORS_FILE, check_floor
from sdk.store.signing import ALGORITHM, key_fingerprint, parse_public_key_pem, verify
from sdk.store.verify import NotRegular, read_regular, read_text

TRUST_ROOT = Path("/etc/perception/trust")
POLICY_FILE = "policy.json"
STORE_TRUST = "trust"
STATEMENTS_FILE = "statements.json"
IDENTITY_FILE = "identity.json"
DOMAIN_RELEASE = b"perception-sdk release statement v2\0"
DOMAIN_TRUST = b"perception-sdk trust statement v1\0"
STAGES = ("install", "trial", "start", "fallback", "rollback")  # fallback: a start of an earlier committed release (service.if_damaged)


def trust_root() -> Path:
    """Root's policy folder. `SDK_TRUST_ROOT` moves it for a process that runs as root (the tests, a bench); any
    other process (the deploy login, the service) always reads /etc/perception/trust."""
    moved = os.environ.get("SDK_TRUST_ROOT")
    return Path(moved) if moved and os.getuid() == 0 else TRUST_ROOT


def canonical(value: dict) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


@dataclass
class Policy:
    keys: dict[str, bytes] = field(default_factory=dict)  # fingerprint -> public key, trusted now
    names: dict[str, str] = field(default_factory=dict)  # fingerprint -> its name
    revoked: set[str] = field(default_factory=set)
    required: bool = False
    device_type: str | None = None
    target: str | None = None
    floors: dict[str, int] = field(default_factory=dict)  # root's floors (the store's are in state.json)
    source: str = "none"
    sequence: int = 0  # the highest sequence number of the trust statements applied here (a new one must be above it)

    @property
    def rooted(self) -> bool:
        return self.source == str(trust_root() / POLICY_FILE)

    def describe(self) -> dict:
        return {
            "source": self.source,
            "signatures_required": self.required,
            "keys": {fp: self.names.get(fp, "") for fp in sorted(self.keys)},
            "revoked": sorted(self.revoked),
            "device_type": self.device_type,
            "target": self.target,
            "floors": self.floors,
            "sequence": self.sequence,
        }


def _secure(path: Path) -> str | None:
    """Why root's policy cannot be trusted (not root's, or writable by others), else None."""
    for part in (path, *path.parents):
        try:
            st = part.lstat()
        except FileNotFoundError:
            continue
        if stat.S_ISLNK(st.st_mode) and part == path:
            return f"{part} is a link"
        if st.st_uid != 0:
            return f"{part} is not owned by root"
        if st.st_mode & 0o022 and not (stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX):
            return f"{part} is writable by others than root"
        if part == Path("/"):
            break
    return None


def _root_policy() -> dict | None:
    folder = trust_root()
    path = folder / POLICY_FILE
    if not path.exists() and not path.is_symlink():
        return None
    unsafe = _secure(path)
    if unsafe:
        raise ReleaseError(f"the device's trust policy is not safe: {unsafe}; nothing is accepted", hint="install it again with the root step")
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        message = f"{path}: cannot read the device's trust policy ({exc}); nothing is accepted"
        raise ReleaseError(message, hint="install it again with the root step") from None
    if not isinstance(data, dict):
        raise ReleaseError(f"{path}: not a trust policy; nothing is accepted", hint="install it again with the root step")
    return data


def _root_floors() -> dict[str, int] | None:
    path = trust_root() / FLOORS_FILE
    if not path.exists() or _secure(path):
        return None
    data = _read_json(path)
    return {str(k): int(v) for k, v in data.items() if isinstance(v, int)} if isinstance(data, dict) else None


def advance_root_floor(pipeline: str, version: int) -> bool:
    """Root's floor for `pipeline` raised to `version` (a commit made by root: the Mender module). Root's file, so a
    stolen deploy login can lower the store's floor but never this one. False where there is no root policy or
    this process is not root."""
    folder = trust_root()
    if os.geteuid() != 0 or not (folder / POLICY_FILE).is_file() or _secure(folder / POLICY_FILE):
        return False
    floors = _root_floors() or {}
    if floors.get(pipeline, 0) >= version:
        return True
    floors[pipeline] = version
    partial = folder / f".{FLOORS_FILE}.{os.getpid()}"
    partial.unlink(missing_ok=True)
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    with os.fdopen(fd, "w") as handle:
        json.dump(floors, handle, sort_keys=True)
        handle.flush()
        os.fchmod(handle.fileno(), 0o644)
        os.fsync(handle.fileno())
    os.replace(partial, folder / FLOORS_FILE)
    return True


def _expired(expires: object) -> bool:
    if not expires:
        return False
    try:
        return datetime.date.fromisoformat(str(expires)) < datetime.datetime.now(datetime.timezone.utc).date()
    except ValueError:
        return True  # an expiry nobody can read is no promise


def load_policy(root: Path) -> Policy:
    """The device's policy: root's when installed, else the store's; the store's rotation and revocation statements
    applied on top, each checked against the keys trusted at its turn."""
    root = Path(root)
    policy = Policy()
    data = _root_policy()
    if data is not None:
        policy.source = str(trust_root() / POLICY_FILE)
        policy.required = bool(data.get("signatures_required", True))
        policy.device_type, policy.target = data.get("device_type"), data.get("target")
        policy.revoked = {str(fp) for fp in data.get("revoked") or []}
        policy.floors = {str(k): int(v) for k, v in (data.get("floors") or {}).items()}
        for name, version in (_root_floors() or {}).items():  # advanced by root's own commits (the Mender module)
            policy.floors[name] = max(policy.floors.get(name, 0), version)
        for entry in data.get("keys") or []:
            public = parse_public_key_pem(str(entry.get("public_key", "")), f"{policy.source}: key {entry.get('name')!r}")
            fingerprint = key_fingerprint(public)
            if not _expired(entry.get("expires")) and fingerprint not in policy.revoked:
                policy.keys[fingerprint], policy.names[fingerprint] = public, str(entry.get("name") or fingerprint)
    else:
        folder = root / STORE_TRUST
        files = sorted((folder / "keys").glob("*.pub")) + ([folder / "verify_key.pub"] if (folder / "verify_key.pub").exists() else [])
        for path in files:
            try:
                public = parse_public_key_pem(read_text(path), str(path))
            except OSError:
                continue
            policy.keys[key_fingerprint(public)], policy.names[key_fingerprint(public)] = public, path.stem
        identity = _read_json(folder / IDENTITY_FILE) or {}
        policy.device_type, policy.target = identity.get("device_type"), identity.get("target")
        policy.source = str(folder)
        state = _read_json(root / "state.json") or {}
        policy.required = bool(policy.keys) or bool(state.get("signatures_required"))
    for statement in _read_json(root / STORE_TRUST / STATEMENTS_FILE) or []:
        _apply(policy, statement)
    return policy


def _read_json(path: Path):
    """A small JSON file, read without following a link or blocking on a special file; None when it is not one."""
    try:
        return json.loads(read_regular(path, limit=4 << 20))
    except (OSError, ValueError, NotRegular, ReleaseError):
        return None


def statement_problem(policy: Policy, body: dict) -> str | None:
    """Why a trust statement does not apply on this device (decision 0952), or None. A statement names the device
    (`device_type`, `target`: one made for another vehicle applies nowhere else) and a `sequence` number above the last
    one applied here (a replayed statement is refused). An earlier SDK's statement (neither) still reads where it was
    recorded, except an `add` under root's policy: there, a key is added only by a statement bound to this device."""
    sequence = body.get("sequence")
    if sequence is None and not any(k in body for k in ("device_type", "target")):
        if body.get("kind") == "add" and policy.rooted:
            return "it names no device and no sequence number (an earlier SDK's statement): under root's policy a key is added only for this device"
        return None
    if not isinstance(sequence, int) or isinstance(sequence, bool) or sequence <= policy.sequence:
        return f"its sequence number {sequence!r} is not above {policy.sequence}, the last one this device applied (a replayed statement)"
    for name in ("device_type", "target"):
        theirs, mine = body.get(name), getattr(policy, name)
        if not isinstance(theirs, str):
            return f"it names no {name}"
        if mine is not None and theirs != mine:
            return f"it is made for {name} {theirs!r}; this device is {mine!r}"
    return None


def _apply(policy: Policy, statement: object) -> None:
    """One rotation or revocation, if a key trusted now signed it; anything else is ignored (it proves nothing)."""
    if not isinstance(statement, dict):
        return
    body = {k: v for k, v in statement.items() if k != "signature"}
    by = body.get("by")
    if by not in policy.keys:
        return
    try:
        signature = base64.b64decode(str(statement.get("signature")), validate=True)
    except (binascii.Error, ValueError):
        return
    if not verify(policy.keys[by], DOMAIN_TRUST + canonical(body), signature) or statement_problem(policy, body):
        return
    if isinstance(body.get("sequence"), int):
        policy.sequence = body["sequence"]
    if body.get("kind") == "add":
        try:
            public = parse_public_key_pem(str(body.get("public_key")), "a rotated key")
        except ReleaseError:
            return
        fingerprint = key_fingerprint(public)
        if fingerprint == body.get("key") and fingerprint not in policy.revoked:
            policy.keys[fingerprint], policy.names[fingerprint] = public, str(body.get("name") or fingerprint)
    elif body.get("kind") == "revoke" and body.get("key") != by:
        policy.revoked.add(str(body.get("key")))
        policy.keys.pop(str(body.get("key")), None)


# A release's statement -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Statement:
    key: str
    version: int | None  # None: signed by an earlier SDK (no version, no binding)
    pipeline: str | None
    device_type: str | None
    targets: tuple[str, ...] | None


def release_message(manifest, version: int, pipeline: str, device_type: str, targets) -> bytes:
    """What a release signature covers: the manifest's canonical text and what the signer states about it."""
    body = {"manifest": manifest.to_json(), "version": version, "pipeline": pipeline, "device_type": device_type, "targets": targets}
    return DOMAIN_RELEASE + canonical(body)


def read_statement(text: str, release: str, expected: str, hint: str) -> tuple[dict, bytes]:
    try:
        document = json.loads(text)
        algorithm, signature = document["algorithm"], base64.b64decode(document["signature"], validate=True)
        str(document["key"])
    except (ValueError, KeyError, TypeError, binascii.Error):
        raise ReleaseError(f"release {release}: its signature file is not a valid signature; the device expects {expected}", hint=hint) from None
    if algorithm != ALGORITHM:
        raise ReleaseError(f"release {release} is signed with {algorithm!r}; this device accepts only {ALGORITHM} by {expected}", hint=hint)
    return document, signature


def check_release(root: Path, manifest, signature_text: str | None, *, stage: str, pipeline: str | None) -> Statement | None:
    """Raise ReleaseError unless the device's policy accepts this release at `stage` (install, trial, start); the
    accepted statement, or None where the device requires no signature. `pipeline`: the name in the release's
    pipeline file."""
    from sdk.store.signing import signed_message

    policy = load_policy(root)
    release = manifest.release_id
    if not policy.required and not policy.keys:
        return None
    expected = ", ".join(f"{policy.names.get(fp, '')} {fp}".strip() for fp in sorted(policy.keys)) or "a key (none is trusted now)"
    hint = f"sign the release with the private half of {expected} ({policy.source}): the target file's sign_key, or --sign-key"
    if signature_text is None:
        raise ReleaseError(f"release {release} is not signed; this device accepts only releases signed by {expected}", hint=hint)
    document, signature = read_statement(signature_text, release, expected, hint)
    key = str(document["key"])
    if key in policy.revoked:
        raise ReleaseError(f"release {release} is signed by key {key}, which this device revoked", hint=hint)
    if key not in policy.keys:
        raise ReleaseError(f"release {release} is signed by key {key}, but this device accepts only {expected}", hint=hint)
    if "version" not in document:  # an earlier SDK's signature: no version, no binding
        if not verify(policy.keys[key], signed_message(manifest), signature):
            raise ReleaseError(f"release {release}: its signature does not verify with key {key}: changed after it was signed", hint=hint)
        if stage not in ("start", "fallback", "rollback"):
            raise ReleaseError(
                f"release {release} is signed without a version or a device binding (an earlier SDK's signature); refused",
                hint="deploy it again with this SDK: it signs the version, the pipeline and the device",
            )
        return Statement(key, None, None, None, None)
    try:
        version, named, device_type = int(document["version"]), str(document["pipeline"]), str(document["device_type"])
        targets = document.get("targets")
        targets = tuple(str(t) for t in targets) if targets is not None else None
    except (KeyError, TypeError, ValueError):
        raise ReleaseError(f"release {release}: its signature's statement is incomplete", hint=hint) from None
    message = release_message(manifest, version, named, device_type, list(targets) if targets is not None else None)
    if not verify(policy.keys[key], message, signature):
        raise ReleaseError(f"release {release}: its signature does not verify with key {key}: changed after it was signed", hint=hint)
    if pipeline is not None and named != pipeline:
        raise ReleaseError(f"release {release} is signed for pipeline {named!r}, but it runs pipeline {pipeline!r}; refused", hint=hint)
    if policy.device_type is not None and device_type != policy.device_type:
        raise ReleaseError(f"release {release} is signed for device type {device_type!r}; this device is {policy.device_type!r}; refused", hint=hint)
    if policy.target is not None and targets is not None and policy.target not in targets:
        raise ReleaseError(f"release {release} is signed for {', '.join(targets)}, not for this device ({policy.target}); refused", hint=hint)
    check_floor(_read_json(Path(root) / "state.json") or {}, policy.floors, release, version, named, stage)
    return Statement(key, version, named, device_type, targets)


def check_signature(root: Path, manifest, signature_text: str | None, *, stage: str = "install", pipeline: str | None = None) -> str | None:
    """Raise ReleaseError unless the device's trust policy (sdk/store/trust.py) accepts the release at `stage`; return the
    verifying key's fingerprint (None where the device requires no signature)."""
    statement = check_release(root, manifest, signature_text, stage=stage, pipeline=pipeline)
    return statement.key if statement is not None else None


def check_release_folder(root: Path, folder: Path, manifest, *, stage: str = "start", pipeline: str | None = None) -> str | None:
    """`check_signature` for an assembled release, from the signature file kept beside its manifest."""
    try:
        text = read_text(Path(folder) / SIGNATURE)
    except FileNotFoundError:
        text = None
    except (OSError, UnicodeDecodeError) as exc:
        raise ReleaseError(f"{Path(folder) / SIGNATURE}: cannot be read as a signature ({getattr(exc, 'strerror', None) or exc})") from None
    return check_signature(root, manifest, text, stage=stage, pipeline=pipeline)


def statement_of(folder: Path) -> dict | None:
    """The signature document kept beside a release's manifest, or None."""
    return _read_json(Path(folder) / SIGNATURE)


__all__ = [
    *("Policy", "Statement", "check_release", "check_release_folder", "check_signature"),
    *("advance_root_floor", "load_policy", "release_message", "statement_of", "statement_problem", "trust_root"),
]
