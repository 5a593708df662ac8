"""`sdk targets trust-key T KEY.pub`: what the target trusts (sdk/store/trust.py, sdk/store/trust_admin.py).

The first key a store trusts is taken as given, with the device's identity (the target file's device type and name);
from then on a new key needs a statement signed by a key the device already trusts (`--signed-by`, by default the
target file's `sign_key`), and `--revoke FINGERPRINT` removes one the same way. The deploy login alone can never
replace the device's trust. A statement names the target (its device type and name) and the next sequence number
the device expects: it applies to this vehicle only, once.
"""

from __future__ import annotations

import base64
import time
from pathlib import Path

from sdk.errors import ConfigError
from tools.release.signing import _raw_public, binding_for, load_signing_key, verify_key_pem


def statement(kind: str, fingerprint: str, signer_path: Path, **extra) -> dict:
    """A rotation (`add`) or a revocation, signed by the key at `signer_path` (sdk/store/trust.py checks it)."""
    from sdk.store.signing import key_fingerprint
    from sdk.store.trust import DOMAIN_TRUST, canonical

    signer = load_signing_key(signer_path)
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    body = {"kind": kind, "key": fingerprint, "by": key_fingerprint(_raw_public(signer)), "at": at, **extra}
    return {**body, "signature": base64.b64encode(signer.sign(DOMAIN_TRUST + canonical(body))).decode()}


def _signer(target, signed_by: Path | None) -> Path:
    spec = getattr(target, "spec", None)
    if signed_by is None and getattr(spec, "sign_key", None):
        signed_by = target.host_path(spec.sign_key)
    if signed_by is None:
        raise ConfigError(
            f"{target.name} already trusts a key: a new key, or a revocation, must be signed by one it trusts",
            hint=f"sdk targets trust-key {target.name} NEW.pub --signed-by CURRENT.key (the private half of a trusted key)",
        )
    return signed_by


def trust_key(target, key: Path | None, signed_by: Path | None = None, revoke: str | None = None) -> dict:
    """Trust `key` on the target (or revoke the key with fingerprint `revoke`); returns the device's policy after."""
    from tools.connect.sessions import open_session
    from tools.release.bundle import runtime_files

    with open_session(target) as session:
        session.ensure_agent(runtime_files())
        now = session.trust({"action": "status"})
        identity = {"device_type": binding_for(target, "").device_type, "target": target.name}
        bound = {**identity, "sequence": int(now.get("sequence") or 0) + 1}  # for this vehicle only, and never again
        if revoke is not None:
            return session.trust({"action": "revoke", "statement": statement("revoke", revoke, _signer(target, signed_by), **bound)})
        pem, fingerprint = verify_key_pem(key)  # any format here; the device stores (and checks) PEM
        request = {"action": "add", "public_key": pem, "name": Path(key).stem, **identity}
        if now["keys"] or now["source"].endswith("policy.json"):
            name = Path(key).stem
            request["statement"] = statement("add", fingerprint, _signer(target, signed_by), public_key=pem, name=name, **bound)
        return session.trust(request)


__all__ = ["statement", "trust_key"]
