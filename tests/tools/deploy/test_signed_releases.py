"""Signed releases over SSH, against a real OpenSSH server: once a device trusts a key, it takes nothing else."""

from __future__ import annotations

import re
import subprocess

import pytest

from sdk.errors import ReleaseError
from sdk.release import ReleaseManifest
from tools.cli import run as cli
from tools.connect.sessions import open_session
from tools.deploy.flow import Deploy
from tools.release.bundle import runtime_files
from tools.release.signing import verify_key_pem
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


def test_over_ssh_an_older_signed_release_is_refused_after_a_newer_one(ssh_target, tiny_pipeline, tmp_path, capsys):
    """A replayed, properly signed older release (captured from the device after its deploy) is refused once a newer
    one of the same pipeline was committed: at install, and by the runtime if it were started by hand."""
    right, _ = keys(tmp_path)
    assert cli(["targets", "trust-key", "sim", str(tmp_path / "release.pub")]) == 0
    ssh_target.write(sign_key=str(right))
    pipeline, _ = tiny_pipeline(frames=20)
    first = Deploy(pipeline.path, "sim", frames=2, report_dir=tmp_path / "r1")()
    old_release = ssh_target.root / "releases" / first.staged.release_id
    old_manifest, old_signature = ReleaseManifest.load(old_release), (old_release / "manifest.json.sig").read_text()
    pipeline.path.write_text(pipeline.path.read_text() + "# the next release\n")
    second = Deploy(pipeline.path, "sim", frames=2, report_dir=tmp_path / "r2")()
    assert second.staged.release_id != first.staged.release_id
    subprocess.run(["rm", "-rf", str(old_release)], check=True)  # pruned, or never on this device: the attacker brings it back
    with open_session(resolve_target("sim")) as session:
        session.ensure_agent(runtime_files())
        with pytest.raises(ReleaseError, match=r"older than version \d+ this device has committed: a downgrade is refused"):
            session.assemble(old_manifest, old_signature)
    assert (ssh_target.root / "current").resolve().name == second.staged.release_id


def test_the_deploy_login_cannot_replace_the_trusted_key_without_the_old_one(ssh_target, tmp_path, capsys):
    right, wrong = keys(tmp_path)
    assert cli(["targets", "trust-key", "sim", str(tmp_path / "release.pub")]) == 0
    _, trusted = verify_key_pem(tmp_path / "release.pub")
    capsys.readouterr()
    assert cli(["targets", "trust-key", "sim", f"{wrong}.pub"]) == 1  # no key to sign the rotation with
    assert "already trusts a key: a new key, or a revocation, must be signed by one it trusts" in capsys.readouterr().err
    assert cli(["targets", "trust-key", "sim", f"{wrong}.pub", "--signed-by", str(wrong)]) == 1  # signed by the newcomer itself
    assert "not signed by a key this device trusts" in capsys.readouterr().err
    assert cli(["targets", "trust-key", "sim", f"{wrong}.pub", "--signed-by", str(right)]) == 0  # a rotation by the trusted key
    _, added = verify_key_pem(f"{wrong}.pub")
    out = capsys.readouterr().out
    assert trusted in out and added in out
    assert cli(["targets", "trust-key", "sim", "--revoke", trusted, "--signed-by", str(wrong)]) == 0
    out = capsys.readouterr().out
    assert f"revoked {trusted}" in out and f"signed by: other_ed25519 {added}" in out


def test_a_release_signed_for_another_device_type_is_refused(ssh_target, tiny_pipeline, tmp_path, capsys):
    right, _ = keys(tmp_path)
    assert cli(["targets", "trust-key", "sim", str(tmp_path / "release.pub")]) == 0  # the device: linux-generic, sim
    ssh_target.write(sign_key=str(right), platform="jetson-agx-orin")  # the same device, a target file for another type
    pipeline, _ = tiny_pipeline(frames=20)
    with pytest.raises(ReleaseError, match="is signed for device type 'jetson-agx-orin'; this device is 'linux-generic'; refused"):
        Deploy(pipeline.path, "sim", frames=2, report_dir=tmp_path / "r")()
    assert not (ssh_target.root / "current").exists()
