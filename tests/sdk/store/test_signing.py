"""Signed releases on the device: the Ed25519 verifiers, and the store refusing what its key did not sign."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from sdk.errors import ReleaseError
from sdk.release import ReleaseManifest
from sdk.store.objects import ReleaseStore
from sdk.store.signing import _L, install_verify_key, key_fingerprint, public_key_pem, signed_message, verify, verify_pure
from tools.release.bundle import Bundle
from tools.release.signing import Binding, sign_manifest
from tools.release.stage import manifest_for

REPO = Path(__file__).resolve().parents[3]
# RFC 8032, section 7.1, TEST 1 (empty message) and TEST 2 (one byte).
RFC_VECTORS = [
    (
        "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a",
        "",
        "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b",
    ),
    (
        "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c",
        "72",
        "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00",
    ),
]


def raw(key: Ed25519PrivateKey) -> bytes:
    return key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


@pytest.mark.parametrize(("public", "message", "signature"), RFC_VECTORS)
def test_both_verifiers_accept_the_rfc_8032_vectors(public, message, signature):
    args = bytes.fromhex(public), bytes.fromhex(message), bytes.fromhex(signature)
    assert verify_pure(*args) and verify(*args)
    bad = bytearray(args[2])
    bad[5] ^= 0x10
    assert not verify_pure(args[0], args[1], bytes(bad)) and not verify(args[0], args[1], bytes(bad))


def test_the_pure_verifier_agrees_with_cryptography_on_random_keys_and_tampering():
    for length in range(0, 200, 13):
        key = Ed25519PrivateKey.generate()
        message = os.urandom(length)
        signature = key.sign(message)
        assert verify_pure(raw(key), message, signature)
        assert not verify_pure(raw(key), message + b"!", signature)
        assert not verify_pure(raw(Ed25519PrivateKey.generate()), message, signature)  # another key
        for index in (0, 31, 32, 63):  # R and S both covered
            bad = bytearray(signature)
            bad[index] ^= 1
            assert not verify_pure(raw(key), message, bytes(bad))
        s = int.from_bytes(signature[32:], "little")  # the same S plus L: a malleated signature is refused
        assert not verify_pure(raw(key), message, signature[:32] + (s + _L).to_bytes(32, "little"))


def release(root: Path, folder: Path, label: str) -> ReleaseManifest:
    """A staged release's manifest, its objects already in the store (nothing assembled)."""
    folder.mkdir(exist_ok=True)
    files = {}
    for name, data in {"pipeline/p.yaml": f"# {label}\n".encode(), "artifacts/model.onnx": b"M" * 100}.items():
        path = folder / f"{label}-{name.replace('/', '_')}"
        path.write_bytes(data)
        files[name] = path
    manifest = manifest_for(Bundle(files, "pipeline/p.yaml", "artifacts", {"label": label}))
    store = ReleaseStore(root)
    store.ensure()
    for name, entry in manifest.files.items():
        store.add_file(files[name], entry.sha256)
    return manifest


def signed(manifest: ReleaseManifest, key, version: int = 1) -> str:
    return sign_manifest(manifest, key, Binding("p", "linux-generic", None), version)


def store_cli(root: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-B", "-m", "sdk", "store", "--root", str(root), *args]
    return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=60, env=env)


def test_a_store_trusting_a_key_refuses_unsigned_foreign_and_tampered_manifests(tmp_path):
    root = tmp_path / "target"
    manifest = release(root, tmp_path / "src", "a")
    store = ReleaseStore(root)
    store.assemble(manifest)  # no key trusted yet: anything goes
    key, other = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    fingerprint = install_verify_key(root, public_key_pem(raw(key)))
    assert fingerprint == key_fingerprint(raw(key)) and (root / "trust" / "verify_key.pub").is_file()

    unsigned = f"release {manifest.release_id} is not signed; this device accepts only releases signed by verify_key {fingerprint}"
    with pytest.raises(ReleaseError, match=re.escape(unsigned)):
        store.assemble(manifest)
    foreign = f"is signed by key {key_fingerprint(raw(other))}, but this device accepts only verify_key {fingerprint}"
    with pytest.raises(ReleaseError, match=re.escape(foreign)):
        store.assemble(manifest, signed(manifest, other))
    forged = json.loads(signed(manifest, other))
    forged["key"] = fingerprint  # claims the right key
    with pytest.raises(ReleaseError, match=re.escape(f"its signature does not verify with key {fingerprint}")):
        store.assemble(manifest, json.dumps(forged))
    tampered = ReleaseManifest(manifest.files, manifest.pipeline, manifest.artifacts, {"label": "changed"})
    assert tampered.release_id == manifest.release_id and signed_message(tampered) != signed_message(manifest)
    with pytest.raises(ReleaseError, match="changed after it was signed"):
        store.assemble(tampered, signed(manifest, key))

    signature = signed(manifest, key)
    store.assemble(manifest, signature)
    assert (store.release_dir(manifest.release_id) / "manifest.json.sig").read_text() == signature
    assert store.verify_signature(manifest.release_id) == fingerprint


def test_store_assemble_and_trial_on_the_device_check_the_signature_with_or_without_cryptography(tmp_path):
    root = tmp_path / "target"
    key = Ed25519PrivateKey.generate()
    old = release(root, tmp_path / "src", "old")
    ReleaseStore(root).assemble(old)  # assembled before the device trusted a key
    (tmp_path / "request.json").write_text(json.dumps({"action": "add", "public_key": public_key_pem(raw(key))}))
    done = store_cli(root, "trust", str(tmp_path / "request.json"))
    assert done.returncode == 0 and json.loads(done.stdout)["trusted"] == key_fingerprint(raw(key))
    done = store_cli(root, "trial", str(old.release_id), "--owner", "t", "--token", "1")
    assert done.returncode == 1 and f"release {old.release_id} is not signed" in done.stderr  # trial checks again

    new = release(root, tmp_path / "src", "new")
    # A device Python without `cryptography`: the pure verifier decides.
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "cryptography.py").write_text("raise ImportError('not on this device')\n")
    env = {**os.environ, "PYTHONPATH": str(hide)}
    for text, signature, expected in (
        (new.to_json(), signed(new, key), 0),
        (new.to_json().replace('"label": "new"', '"label": "newer"'), signed(new, key), 1),
    ):
        (tmp_path / "m.json").write_text(text)
        (tmp_path / "m.json.sig").write_text(signature)
        done = store_cli(root, "assemble", str(tmp_path / "m.json"), "--signature", str(tmp_path / "m.json.sig"), env=env)
        assert done.returncode == expected, done.stderr
        assert not (tmp_path / "m.json").exists() and not (tmp_path / "m.json.sig").exists()  # consumed either way
    assert "does not verify with key" in done.stderr
    assert (root / "releases" / new.release_id / "manifest.json.sig").is_file()


def test_a_public_key_of_another_algorithm_of_the_same_length_is_not_taken_for_an_ed25519_key():
    """An X25519 key's PEM is as long as an Ed25519 key's, only its algorithm differs: it is refused by name, at
    `sdk targets trust-key`'s store step as when a policy is read."""
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

    from sdk.store.signing import parse_public_key_pem

    pem = X25519PrivateKey.generate().public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    with pytest.raises(ReleaseError) as refused:
        parse_public_key_pem(pem.decode(), "keys/x25519.pub")
    assert refused.value.message == "keys/x25519.pub: not an Ed25519 public key (only Ed25519 keys sign releases)"
