"""Changing what a device trusts: `python -m sdk store --root R trust REQUEST.json` (sdk/store/trust.py is the policy).

A request is one JSON object, its `action` one of:

- `status`: the policy as the device reads it now (keys, revocations, identity, floors, where it comes from);
- `add`: trust `public_key`. The first key of a store without root's policy is trusted as given (trust on first
  use: whoever holds the deploy login), with the device's identity (`device_type`, `target`), and from then on
  signatures are required. Any later key needs `statement`: `{"kind": "add", "key", "public_key", "name", "by",
  "at", "device_type", "target", "sequence", "signature"}` signed by a key trusted now (a rotation: both keys are
  trusted afterwards);
- `revoke`: `statement` `{"kind": "revoke", "key", "by", "at", "device_type", "target", "sequence", "signature"}`
  signed by another trusted key; the revoked key's releases are refused from the next start on;
- `install-policy` (root only): root's policy `policy` written as /etc/perception/trust/policy.json, root's, 0644;
- `raise-floors` (root only): root's version floor raised to the committed release's signed version (sdk/store/trust.py:
  `raise_root_floors`), so that the deploy login, which writes state.json, cannot lower the floor that holds.

Statements are appended to `<root>/trust/statements.json` only once they verify against the policy as it stands, name
this device, and carry a sequence number above the last one applied here (`status` says it: `sequence`).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from sdk.durable import open_new
from sdk.errors import ReleaseError
from sdk.store.floors import summary
from sdk.store.signing import key_fingerprint, parse_public_key_pem, public_key_pem
from sdk.store.trust import (
    IDENTITY_FILE,
    POLICY_FILE,
    STATEMENTS_FILE,
    STORE_TRUST,
    _apply,
    _read_json,
    advance_root_floor,
    load_policy,
    statement_of,
    statement_problem,
    trust_root,
)

ACTIONS = ("status", "add", "revoke", "install-policy", "raise-floors")


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".tmp-{path.name}-{os.getpid()}")
    with open_new(partial) as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    partial.chmod(mode)
    os.replace(partial, path)


def _statements(store) -> list:
    path = store.root / STORE_TRUST / STATEMENTS_FILE
    try:
        found = json.loads(path.read_text())
    except FileNotFoundError:
        return []
    except (OSError, ValueError):
        raise ReleaseError(f"{path} is damaged; nothing was changed", hint="restore it, or remove it and trust the keys again") from None
    return found if isinstance(found, list) else []


def _append_statement(store, statement: dict, check) -> None:
    """Append `statement` once it does what `check(policy_after)` expects against the policy as it stands."""
    before = load_policy(store.root)
    body = {k: v for k, v in statement.items() if k != "signature"}
    if "sequence" not in body:
        raise ReleaseError(
            "the statement names no device and no sequence number (an earlier SDK made it): this device takes only statements bound to it",
            hint="make it again with this SDK: sdk targets trust-key binds it to the target and numbers it",
        )
    problem = statement_problem(before, body)
    if problem:
        raise ReleaseError(f"the statement does not apply to this device: {problem}", hint="make it again for this target: sdk targets trust-key")
    after = load_policy(store.root)
    _apply(after, statement)
    if not check(before, after):
        raise ReleaseError(
            f"the statement is not signed by a key this device trusts now ({', '.join(sorted(before.keys)) or 'none'}), or says something else",
            hint="sign it with the private half of a trusted key: sdk targets trust-key T NEW.pub --signed-by OLD.key",
        )
    statements = _statements(store)
    _write(store.root / STORE_TRUST / STATEMENTS_FILE, json.dumps([*statements, statement], indent=1) + "\n")


def administer(store, request: dict) -> dict:
    action = request.get("action")
    if action not in ACTIONS:
        raise ReleaseError(f"unknown trust action {action!r}; allowed: {', '.join(ACTIONS)}")
    if action == "install-policy":
        return install_policy(request.get("policy"))
    if action == "raise-floors":
        return raise_root_floors(store)
    policy = load_policy(store.root)
    rooted = policy.source == str(trust_root() / POLICY_FILE)
    if action == "status":
        return policy.describe()
    statement = request.get("statement")
    if action == "revoke":
        if not isinstance(statement, dict) or statement.get("kind") != "revoke":
            raise ReleaseError("a revocation needs a statement signed by a key this device trusts", hint="sdk targets trust-key T --revoke FP")
        _append_statement(store, statement, lambda before, after: statement.get("key") in after.revoked and statement.get("key") not in after.keys)
        return {**load_policy(store.root).describe(), "revoked_key": statement["key"]}
    public = parse_public_key_pem(str(request.get("public_key", "")), "the key to trust")
    fingerprint = key_fingerprint(public)
    if fingerprint in policy.revoked:
        raise ReleaseError(f"key {fingerprint} was revoked on this device; it is not trusted again", hint="make a new key")
    if fingerprint in policy.keys:
        return {"trusted": fingerprint, "already": True, **policy.describe()}
    if policy.keys or rooted:
        if not isinstance(statement, dict) or statement.get("kind") != "add" or statement.get("key") != fingerprint:
            raise ReleaseError(
                f"this device already trusts {', '.join(sorted(policy.keys)) or 'root policy keys'}: a new key is trusted only when a trusted key "
                "signs it (a rotation); the deploy login alone cannot replace it",
                hint="sdk targets trust-key T NEW.pub --signed-by CURRENT.key",
            )
        _append_statement(store, statement, lambda before, after: fingerprint in after.keys)
        return {"trusted": fingerprint, "rotation": True, **load_policy(store.root).describe()}
    folder = store.root / STORE_TRUST
    name = str(request.get("name") or "")
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", name) or (folder / "keys" / f"{name}.pub").exists():
        name = fingerprint.removeprefix("SHA256:").replace("/", "_").replace("+", "-")
    _write(folder / "keys" / f"{name}.pub", public_key_pem(public))
    identity = {k: request.get(k) for k in ("device_type", "target") if isinstance(request.get(k), str)}
    if identity:
        _write(folder / IDENTITY_FILE, json.dumps(identity) + "\n")
    _require_signatures(store)
    return {"trusted": fingerprint, "path": str(folder), **load_policy(store.root).describe()}


def _require_signatures(store) -> None:
    """state.json remembers that this store trusts keys: a key file deleted later refuses everything."""
    from sdk.store.activation import STATE_FILE, state_record

    state = store.state()
    if not state.get("signatures_required"):
        store._write_json(STATE_FILE, state_record(state, signatures_required=True))


def install_policy(policy: object) -> dict:
    """Root's policy, checked (every key parses; a device type is named), written as root's file, 0644."""
    if os.geteuid() != 0:
        raise ReleaseError("installing the device's trust policy needs root", hint="run it with sudo: it is the one root step of trust")
    if not isinstance(policy, dict) or not isinstance(policy.get("keys"), list) or not policy["keys"]:
        raise ReleaseError("a trust policy names at least one key: {\"keys\": [{\"name\", \"public_key\", \"expires\"?}], ...}")
    for entry in policy["keys"]:
        parse_public_key_pem(str((entry or {}).get("public_key", "")), f"policy key {(entry or {}).get('name')!r}")
    folder = trust_root()
    folder.mkdir(parents=True, exist_ok=True)
    os.chown(folder, 0, 0)
    folder.chmod(0o755)
    _write(folder / POLICY_FILE, json.dumps(policy, indent=1, sort_keys=True) + "\n")
    os.chown(folder / POLICY_FILE, 0, 0)
    return {"installed": str(folder / POLICY_FILE)}


def floor_status(root: Path) -> dict:
    """Which version floor holds for each pipeline, and whose it is (`sdk status`; sdk/store/floors.py)."""
    try:
        policy = load_policy(root)
    except ReleaseError as exc:
        return {"held_by": "unreadable", "note": exc.message, "pipelines": {}}
    state = _read_json(Path(root) / "state.json") or {}
    return summary(state, policy.floors, policy.source == str(trust_root() / POLICY_FILE))


def raise_root_floors(store) -> dict:
    """The root step that keeps the floor out of the deploy login's reach on an SSH device: root's floor for the
    committed release's pipeline raised to its signed version, once its bytes and its signature verify under root's
    policy. Whatever the login wrote, root's floor only rises to a version a trusted key signed for this device."""
    from sdk.store.verify import verify_release

    if os.geteuid() != 0:
        raise ReleaseError("raising root's version floor needs root", hint="run it with sudo: it is a root step")
    if load_policy(store.root).source != str(trust_root() / POLICY_FILE):
        raise ReleaseError(f"there is no root policy ({trust_root() / POLICY_FILE}): no floor of root's to raise", hint="install root's policy first")
    committed = store.state()["committed"]
    raised = None
    if committed is not None:
        verify_release(store.release_dir(committed))
        store.verify_signature(committed, stage="start")
        statement = statement_of(store.release_dir(committed)) or {}
        version, pipeline = statement.get("version"), statement.get("pipeline")
        if isinstance(version, int) and isinstance(pipeline, str) and advance_root_floor(pipeline, version):
            raised = {"pipeline": pipeline, "version": version}
    return {"raised": raised, "floors": floor_status(store.root)}


__all__ = ["ACTIONS", "administer", "floor_status", "install_policy", "raise_root_floors"]
