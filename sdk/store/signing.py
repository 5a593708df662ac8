"""Signed releases: the device accepts only manifests signed by the key it trusts, once it trusts one.

    <root>/trust/verify_key.pub       the Ed25519 public key (PEM, SubjectPublicKeyInfo) the device trusts,
                                      written by `sdk targets trust-key T KEY.pub`
    <release>/manifest.json.sig       {"algorithm": "ed25519", "key": FINGERPRINT, "signature": BASE64}

What is signed is the manifest's canonical text (`ReleaseManifest.to_json()`: every file's hash and
length, the pipeline, the artifacts folder), after a fixed domain prefix, so a signature over a manifest
can never be taken for a signature over anything else. A device without a verify key accepts any release
(as before); a device with one refuses unsigned, tampered and foreign-signed manifests at `store assemble`
and again at `store trial`, naming the key it expects. Keys are named by their OpenSSH SHA256
fingerprint (what `ssh-keygen -lf KEY.pub` prints for the same key).

This runs on the device's bare Python, before any release environment exists: verification uses the
`cryptography` package when the device has it, and otherwise the pure-Python Ed25519 verifier below
(RFC 8032, section 5.1.7; verification only, which handles no secret). Decision record 0302.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import struct
from pathlib import Path

from sdk.errors import ReleaseError

TRUST_DIR = "trust"
VERIFY_KEY_FILE = "verify_key.pub"
ALGORITHM = "ed25519"
DOMAIN = b"perception-sdk release manifest v1\0"
_SPKI_PREFIX = bytes.fromhex("302a300506032b6570032100")  # SubjectPublicKeyInfo of an Ed25519 key, before its 32 bytes


# Keys ------------------------------------------------------------------------------------------
def key_fingerprint(public: bytes) -> str:
    """`SHA256:...` as OpenSSH prints it for the same key (`ssh-keygen -lf`)."""
    blob = struct.pack(">I", 11) + b"ssh-ed25519" + struct.pack(">I", len(public)) + public
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


def public_key_pem(public: bytes) -> str:
    body = base64.b64encode(_SPKI_PREFIX + public).decode()
    return f"-----BEGIN PUBLIC KEY-----\n{body}\n-----END PUBLIC KEY-----\n"


def parse_public_key_pem(text: str, where: str = "public key") -> bytes:
    """The 32 bytes of an Ed25519 public key in PEM (SubjectPublicKeyInfo); ReleaseError otherwise."""
    lines = [line.strip() for line in text.strip().splitlines()]
    if len(lines) < 3 or lines[0] != "-----BEGIN PUBLIC KEY-----" or lines[-1] != "-----END PUBLIC KEY-----":
        raise ReleaseError(f"{where}: not a PEM public key (-----BEGIN PUBLIC KEY-----)")
    try:
        der = base64.b64decode("".join(lines[1:-1]), validate=True)
    except (binascii.Error, ValueError):
        raise ReleaseError(f"{where}: the PEM body is not base64") from None
    if len(der) != len(_SPKI_PREFIX) + 32 or not der.startswith(_SPKI_PREFIX):
        raise ReleaseError(f"{where}: not an Ed25519 public key (only Ed25519 keys sign releases)")
    return der[len(_SPKI_PREFIX) :]


def verify_key_path(root: Path) -> Path:
    return Path(root) / TRUST_DIR / VERIFY_KEY_FILE


def read_verify_key(root: Path) -> bytes | None:
    """The key this device trusts, or None when it trusts none (and accepts unsigned releases)."""
    path = verify_key_path(root)
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ReleaseError(f"{path}: cannot read the device's verify key: {exc.strerror}; nothing was changed") from None
    return parse_public_key_pem(text, str(path))


def install_verify_key(root: Path, pem: str) -> str:
    """Trust this key from now on (an atomic replace of any earlier one); returns its fingerprint."""
    public = parse_public_key_pem(pem, "the verify key")
    folder = Path(root) / TRUST_DIR
    folder.mkdir(parents=True, exist_ok=True)
    temporary = folder / f".tmp-{VERIFY_KEY_FILE}-{os.getpid()}"
    with temporary.open("w") as handle:
        handle.write(public_key_pem(public))
        handle.flush()
        os.fsync(handle.fileno())
    temporary.chmod(0o644)
    os.replace(temporary, verify_key_path(root))
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return key_fingerprint(public)


# Signatures ------------------------------------------------------------------------------------
def signed_message(manifest) -> bytes:
    """The bytes a release signature covers: the domain prefix and the manifest's canonical text."""
    return DOMAIN + manifest.to_json().encode()


def signature_document(fingerprint: str, signature: bytes) -> str:
    return json.dumps({"algorithm": ALGORITHM, "key": fingerprint, "signature": base64.b64encode(signature).decode()}, sort_keys=True) + "\n"


def verify(public: bytes, message: bytes, signature: bytes) -> bool:
    """Ed25519 verification: `cryptography` when the device has it, else the pure-Python verifier."""
    try:
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
    except ImportError:
        return verify_pure(public, message, signature)
    try:
        Ed25519PublicKey.from_public_bytes(public).verify(signature, message)
    except (InvalidSignature, ValueError):
        return False
    return True


# Ed25519 verification in pure Python (RFC 8032, section 5.1) --------------------------------------
_P = 2**255 - 19
_L = 2**252 + 27742317777372353535851937790883648493
_D = -121665 * pow(121666, _P - 2, _P) % _P
_SQRT_M1 = pow(2, (_P - 1) // 4, _P)


def _add(a: tuple, b: tuple) -> tuple:
    """Points in extended coordinates (X, Y, Z, T): x = X/Z, y = Y/Z, x*y = T/Z. The formula is complete."""
    x1, y1, z1, t1 = a
    x2, y2, z2, t2 = b
    e0 = (y1 - x1) * (y2 - x2) % _P
    e1 = (y1 + x1) * (y2 + x2) % _P
    c = 2 * _D * t1 * t2 % _P
    d = 2 * z1 * z2 % _P
    e, f, g, h = e1 - e0, d - c, d + c, e1 + e0
    return (e * f % _P, g * h % _P, f * g % _P, e * h % _P)


def _multiply(scalar: int, point: tuple) -> tuple:
    result = (0, 1, 1, 0)  # the neutral element
    while scalar:
        if scalar & 1:
            result = _add(result, point)
        point = _add(point, point)
        scalar >>= 1
    return result


def _same(a: tuple, b: tuple) -> bool:
    return (a[0] * b[2] - b[0] * a[2]) % _P == 0 and (a[1] * b[2] - b[1] * a[2]) % _P == 0


def _decode_point(data: bytes) -> tuple | None:
    if len(data) != 32:
        return None
    number = int.from_bytes(data, "little")
    sign, y = number >> 255, number & ((1 << 255) - 1)
    if y >= _P:
        return None
    u, v = (y * y - 1) % _P, (_D * y * y + 1) % _P
    x = u * pow(v, 3, _P) * pow(u * pow(v, 7, _P), (_P - 5) // 8, _P) % _P  # a candidate root of u/v
    if (v * x * x - u) % _P != 0:
        if (v * x * x + u) % _P != 0:
            return None
        x = x * _SQRT_M1 % _P
    if x == 0 and sign:
        return None
    if x & 1 != sign:
        x = _P - x
    return (x, y, 1, x * y % _P)


_BASE = _decode_point((4 * pow(5, _P - 2, _P) % _P).to_bytes(32, "little"))


def verify_pure(public: bytes, message: bytes, signature: bytes) -> bool:
    """[S]B == R + [k]A with k = SHA-512(R || A || M) mod L; S must be below L, R and A valid encodings."""
    if len(public) != 32 or len(signature) != 64:
        return False
    point_a, point_r = _decode_point(public), _decode_point(signature[:32])
    s = int.from_bytes(signature[32:], "little")
    if point_a is None or point_r is None or s >= _L:
        return False
    k = int.from_bytes(hashlib.sha512(signature[:32] + public + message).digest(), "little") % _L
    return _same(_multiply(s, _BASE), _add(point_r, _multiply(k, point_a)))
