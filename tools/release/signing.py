"""The host half of signed releases: sign a manifest with an Ed25519 key; read public keys to trust.

Keys are read with `cryptography` (paramiko depends on it): a private key in PEM (PKCS#8, e.g.
`openssl genpkey -algorithm ed25519`) or OpenSSH format (`ssh-keygen -t ed25519`), unencrypted; a
public key in PEM or OpenSSH (`ssh-ed25519 AAAA...`) format, or the private key file itself. The
device side (sdk/store/signing.py) verifies with the standard library alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sdk.errors import ConfigError
from sdk.release import ReleaseManifest
from sdk.store.signing import key_fingerprint, public_key_pem, signature_document, signed_message


def _raw_public(key) -> bytes:
    """The 32 bytes of an Ed25519 public key, or of a private key's public half."""
    from cryptography.hazmat.primitives import serialization

    key = key.public_key() if hasattr(key, "public_key") else key
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


PASSPHRASE_ENV = "SDK_SIGN_KEY_PASSPHRASE"  # the passphrase of an encrypted sign key (a CI secret), else asked on a terminal


def load_signing_key(path: Path):
    """An Ed25519 private key from a PEM or OpenSSH file, readable by its owner alone (as OpenSSH demands of its own
    keys); encrypted ones with the passphrase from SDK_SIGN_KEY_PASSPHRASE or a terminal. ConfigError otherwise."""
    import os
    import stat as statmod

    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    try:
        data = Path(path).read_bytes()
        mode = statmod.S_IMODE(os.stat(path).st_mode)
    except OSError as exc:
        raise ConfigError(f"sign key {path}: cannot read it: {exc.strerror}") from None
    if mode & 0o077:
        raise ConfigError(f"sign key {path} is readable or writable by others (mode {mode:04o}): refused", hint=f"chmod 600 {path}")
    key = None
    for loader in (serialization.load_pem_private_key, serialization.load_ssh_private_key):
        try:
            key = loader(data, password=None)
            break
        except TypeError:  # encrypted: its passphrase
            key = _load_encrypted(loader, data, path)
            break
        except (ValueError, UnsupportedAlgorithm):
            continue
    if key is None:
        raise ConfigError(f"sign key {path}: not a PEM or OpenSSH private key", hint="make one: openssl genpkey -algorithm ed25519 -out release.key")
    if not isinstance(key, Ed25519PrivateKey):
        raise ConfigError(f"sign key {path} is not an Ed25519 key (releases are signed with Ed25519)", hint="openssl genpkey -algorithm ed25519")
    return key


def _load_encrypted(loader, data: bytes, path: Path):
    import getpass
    import os
    import sys

    passphrase = os.environ.get(PASSPHRASE_ENV)
    if passphrase is None and sys.stdin.isatty():
        passphrase = getpass.getpass(f"passphrase of sign key {path}: ")
    if passphrase is None:
        raise ConfigError(f"sign key {path} is encrypted and no passphrase was given", hint=f"set {PASSPHRASE_ENV}, or run on a terminal")
    try:
        return loader(data, password=passphrase.encode())
    except (ValueError, TypeError):
        raise ConfigError(f"sign key {path}: the passphrase does not open it", hint=f"check {PASSPHRASE_ENV}") from None


@dataclass(frozen=True)
class Binding:
    """What a signature states besides the manifest (sdk/store/trust.py): the pipeline, the device type, the targets."""

    pipeline: str
    device_type: str
    targets: tuple[str, ...] | None


def next_version(pipeline: str) -> int:
    """An always-increasing release version for `pipeline`: the signing time in milliseconds, and more than every
    version this host signed for it before (kept in the host's state folder, so a clock set back never reuses one)."""
    import json
    import time

    from tools.state import state_dir

    path = state_dir() / "signing" / "versions.json"
    try:
        known = json.loads(path.read_text())
    except (OSError, ValueError):
        known = {}
    version = max(int(time.time() * 1000), int(known.get(pipeline, 0)) + 1)
    known[pipeline] = version
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(json.dumps(known, indent=1, sort_keys=True) + "\n")
    partial.replace(path)
    return version


def sign_manifest(manifest: ReleaseManifest, key, binding: Binding, version: int | None = None) -> str:
    """manifest.json.sig's text: the key's fingerprint, the version and binding, and the signature over all of it."""
    import base64
    import json

    from sdk.store.signing import ALGORITHM
    from sdk.store.trust import release_message

    version = version if version is not None else next_version(binding.pipeline)
    targets = list(binding.targets) if binding.targets is not None else None
    signature = key.sign(release_message(manifest, version, binding.pipeline, binding.device_type, targets))
    document = {
        "algorithm": ALGORITHM,
        "key": key_fingerprint(_raw_public(key)),
        "version": version,
        "pipeline": binding.pipeline,
        "device_type": binding.device_type,
        "targets": targets,
        "signature": base64.b64encode(signature).decode(),
    }
    return json.dumps(document, sort_keys=True) + "\n"


def sign_legacy(manifest: ReleaseManifest, key) -> str:
    """An earlier SDK's signature (the manifest alone, no version or binding): what devices still hold."""
    return signature_document(key_fingerprint(_raw_public(key)), key.sign(signed_message(manifest)))


def binding_for(target, pipeline: str) -> Binding:
    """What a release for `target` states: its pipeline, the target's device type (Mender's, else its platform) and name."""
    spec = getattr(target, "spec", None)
    mender = getattr(spec, "mender", None)
    device_type = getattr(mender, "device_type", None) or getattr(spec, "platform", None) or "linux-generic"
    return Binding(pipeline, device_type, (target.name,))


def signer_for(path: Path | None, binding: Binding | None = None):
    """manifest -> its signature text, or None for a target that signs nothing."""
    if path is None:
        return lambda manifest: None
    key = load_signing_key(path)
    if binding is None:
        raise ConfigError("internal: a signed release needs its binding (pipeline, device type, target)")
    return lambda manifest: sign_manifest(manifest, key, binding)


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
