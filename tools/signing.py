"""The host half of signed releases: sign a manifest with an Ed25519 key; read public keys to trust.

Keys are read with `cryptography` (paramiko depends on it): a private key in PEM (PKCS#8, e.g.
`openssl genpkey -algorithm ed25519`) or OpenSSH format (`ssh-keygen -t ed25519`), unencrypted; a
public key in PEM or OpenSSH (`ssh-ed25519 AAAA...`) format, or the private key file itself. The
device side (sdk/signing.py) verifies with the standard library alone.
"""

from __future__ import annotations

from pathlib import Path

from sdk.errors import ConfigError
from sdk.release import ReleaseManifest
from sdk.signing import key_fingerprint, public_key_pem, signature_document, signed_message


def _raw_public(key) -> bytes:
    """The 32 bytes of an Ed25519 public key, or of a private key's public half."""
    from cryptography.hazmat.primitives import serialization

    key = key.public_key() if hasattr(key, "public_key") else key
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def load_signing_key(path: Path):
    """An Ed25519 private key from a PEM or OpenSSH file; ConfigError naming the file otherwise."""
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"sign key {path}: cannot read it: {exc.strerror}") from None
    key = None
    for loader in (serialization.load_pem_private_key, serialization.load_ssh_private_key):
        try:
            key = loader(data, password=None)
            break
        except TypeError:
            raise ConfigError(f"sign key {path} is encrypted; the SDK signs with an unencrypted key", hint="keep it readable by you alone") from None
        except (ValueError, UnsupportedAlgorithm):
            continue
    if key is None:
        raise ConfigError(f"sign key {path}: not a PEM or OpenSSH private key", hint="make one: openssl genpkey -algorithm ed25519 -out release.key")
    if not isinstance(key, Ed25519PrivateKey):
        raise ConfigError(f"sign key {path} is not an Ed25519 key (releases are signed with Ed25519)", hint="openssl genpkey -algorithm ed25519")
    return key


def sign_manifest(manifest: ReleaseManifest, key) -> str:
    """manifest.json.sig's text: the key's fingerprint and its signature over the manifest's canonical text."""
    return signature_document(key_fingerprint(_raw_public(key)), key.sign(signed_message(manifest)))


def signer_for(path: Path | None):
    """manifest -> its signature text, or None for a target that signs nothing."""
    if path is None:
        return lambda manifest: None
    key = load_signing_key(path)
    return lambda manifest: sign_manifest(manifest, key)


def read_public_key(path: Path) -> bytes:
    """The 32 bytes of an Ed25519 public key from a PEM or OpenSSH public key file (or a private key file)."""
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"verify key {path}: cannot read it: {exc.strerror}") from None
    key = None
    for loader in (serialization.load_pem_public_key, serialization.load_ssh_public_key):
        try:
            key = loader(data.strip())
            break
        except (ValueError, UnsupportedAlgorithm):
            continue
    if key is None:
        return _raw_public(load_signing_key(path))
    if not isinstance(key, Ed25519PublicKey):
        raise ConfigError(f"verify key {path} is not an Ed25519 key (releases are signed with Ed25519)")
    return _raw_public(key)


def verify_key_pem(path: Path) -> tuple[str, str]:
    """(PEM text the device stores, fingerprint) of a public key file."""
    public = read_public_key(path)
    return public_key_pem(public), key_fingerprint(public)
