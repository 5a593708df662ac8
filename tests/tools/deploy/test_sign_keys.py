"""The release sign key on the host: private to its owner (as OpenSSH demands of its keys), and an encrypted one opens
with its passphrase (a CI secret in SDK_SIGN_KEY_PASSPHRASE, or a terminal)."""

from __future__ import annotations

import subprocess

import pytest

from sdk.errors import ConfigError
from tools.release.signing import PASSPHRASE_ENV, load_signing_key


@pytest.fixture()
def key(tmp_path):
    path = tmp_path / "release.key"
    subprocess.run(["openssl", "genpkey", "-algorithm", "ed25519", "-out", str(path)], check=True)
    path.chmod(0o600)
    return path


@pytest.mark.parametrize("mode", [0o666, 0o644, 0o640, 0o604])
def test_a_sign_key_others_may_read_or_write_is_refused(key, mode):
    key.chmod(mode)
    with pytest.raises(ConfigError, match=f"readable or writable by others \\(mode {mode:04o}\\): refused") as refused:
        load_signing_key(key)
    assert refused.value.hint == f"chmod 600 {key}"


def test_an_encrypted_sign_key_opens_with_its_passphrase(tmp_path, monkeypatch):
    path = tmp_path / "encrypted.key"
    subprocess.run(["openssl", "genpkey", "-algorithm", "ed25519", "-aes-256-cbc", "-pass", "pass:s3cret", "-out", str(path)], check=True)
    path.chmod(0o600)
    monkeypatch.delenv(PASSPHRASE_ENV, raising=False)
    with pytest.raises(ConfigError, match="is encrypted and no passphrase was given"):
        load_signing_key(path)
    monkeypatch.setenv(PASSPHRASE_ENV, "wrong")
    with pytest.raises(ConfigError, match="the passphrase does not open it"):
        load_signing_key(path)
    monkeypatch.setenv(PASSPHRASE_ENV, "s3cret")
    assert load_signing_key(path).sign(b"x")
