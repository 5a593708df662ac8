"""`sdk targets trust-key T KEY.pub`: from now on the target accepts only releases signed by this key."""

from __future__ import annotations

from pathlib import Path

from tools.signing import verify_key_pem


def trust_key(target, key: Path) -> dict:
    """Install the Ed25519 public key as ROOT/trust/verify_key.pub on the target; returns its fingerprint and path."""
    from tools.release.bundle import runtime_files
    from tools.sessions import open_session

    pem, _ = verify_key_pem(key)  # any format here; the device stores (and checks) PEM
    with open_session(target) as session:
        session.ensure_agent(runtime_files())
        return session.trust_key(pem)
