"""Signed releases over SSH, against a real OpenSSH server: once a device trusts a key, it takes nothing else."""

from __future__ import annotations

import re
import subprocess

import pytest

from sdk.errors import ReleaseError
from sdk.release import ReleaseManifest
from tools.cli import run as cli
from tools.deploy import Deploy
from tools.release.bundle import runtime_files
from tools.sessions import open_session
from tools.signing import verify_key_pem
from tools.targets import resolve_target


def keys(tmp_path):
    """A PEM (openssl) and an OpenSSH (ssh-keygen) Ed25519 key: both formats sign."""
    right, wrong = tmp_path / "release.key", tmp_path / "other_ed25519"
    subprocess.run(["openssl", "genpkey", "-algorithm", "ed25519", "-out", str(right)], check=True)
    subprocess.run(["openssl", "pkey", "-in", str(right), "-pubout", "-out", str(tmp_path / "release.pub")], check=True)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(wrong)], check=True)
    return right, wrong


def test_a_device_trusting_a_key_refuses_unsigned_wrong_key_and_tampered_manifests(ssh_target, tiny_pipeline, tmp_path, capsys):
    right, wrong = keys(tmp_path)
    _, expected = verify_key_pem(tmp_path / "release.pub")
    _, other = verify_key_pem(wrong)
    assert cli(["targets", "trust-key", "sim", str(tmp_path / "release.pub")]) == 0
    assert expected in capsys.readouterr().out
    (key_file,) = (ssh_target.root / "trust" / "keys").glob("*.pub")
    assert key_file.read_text().startswith("-----BEGIN PUBLIC KEY-----")
    pipeline, _ = tiny_pipeline(frames=20)

    accepts = f"this device accepts only releases signed by {key_file.stem} {expected}"
    with pytest.raises(ReleaseError, match=re.escape(f"is not signed; {accepts}")) as unsigned:
        Deploy(pipeline.path, "sim", frames=2, report_dir=tmp_path / "r0")()
    assert expected in unsigned.value.hint
    with pytest.raises(ReleaseError, match=re.escape(f"is signed by key {other}, but this device accepts only {key_file.stem} {expected}")):
        Deploy(pipeline.path, "sim", frames=2, report_dir=tmp_path / "r1", sign_key=wrong)()
    assert not [p for p in (ssh_target.root / "releases").iterdir() if not p.name.startswith(".")]  # nothing was assembled
    assert not (ssh_target.root / "current").exists()

    ssh_target.write(sign_key=str(right))  # the target file's sign_key
    good = Deploy(pipeline.path, "sim", frames=2, report_dir=tmp_path / "r2")()
    release = ssh_target.root / "releases" / good.staged.release_id
    assert (ssh_target.root / "current").resolve() == release and (release / "manifest.json.sig").is_file()

    # Tampered on the way: the same files (same release id), a changed manifest, the original signature.
    manifest = ReleaseManifest.load(release)
    tampered = ReleaseManifest(manifest.files, manifest.pipeline, manifest.artifacts, {**manifest.fingerprint, "sdk": "9.9.9"})
    assert tampered.release_id == manifest.release_id
    with open_session(resolve_target("sim")) as session:
        session.ensure_agent(runtime_files())
        signature = (release / "manifest.json.sig").read_text()  # what the device holds: the release's own statement
        with pytest.raises(ReleaseError, match=re.escape(f"its signature does not verify with key {expected}")):
            session.assemble(tampered, signature)
    assert ReleaseManifest.load(release) == manifest  # the release on the device is untouched
