"""Mender: `sdk export` artifacts installed by the real `mender` client (standalone) through the real update module.

Every install runs the release's health check on this machine (the tiny pipeline), through the same store,
trial and commit code an SSH deploy drives; see tests/tools/mender_device.py for the sandboxed client.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from sdk.release import ReleaseManifest
from tests.tools.mender_device import DEVICE_TYPE, FACTORY, MenderDevice, payload_files, require_mender, tamper
from tools.deploy.export import ExportMender


@pytest.fixture()
def device(tmp_path, state_dir, monkeypatch):
    require_mender()
    targets = tmp_path / "targets"
    targets.mkdir()
    monkeypatch.setenv("SDK_TARGETS_DIR", str(targets))
    return MenderDevice(tmp_path / "device", tmp_path / "device-store").setup()


def write_target(targets: Path, **extra) -> None:
    """A target file for exports only (nothing connects to it): its platform, Mender device type and store."""
    document = {
        "host": "192.0.2.1",
        "user": "perception",
        "key_file": "unused",
        "host_key": {"fingerprint": "SHA256:" + "A" * 43},
        "platform": "linux-generic",
        "remote_root": "/var/lib/perception",
        "mender": {"device_type": DEVICE_TYPE, "missing_modules": []},  # the test's Python has every runtime module
        **extra,
    }
    (targets / "vehicle.yaml").write_text(yaml.safe_dump(document))


@pytest.fixture()
def export(tiny_pipeline, tmp_path, device):
    """export(frames, name, artifact_key=None, **target_keys) -> (artifact, release id) of the tiny pipeline whose
    source has `frames` frames; `artifact_key` signs the artifact (mender-artifact -k)."""
    targets = tmp_path / "targets"

    def build(frames: int, name: str, artifact_key: Path | None = None, **target_keys) -> tuple[Path, str]:
        write_target(targets, **target_keys)
        pipeline, _ = tiny_pipeline(frames=frames)
        result = ExportMender(pipeline.path, "vehicle", tmp_path / "out" / f"{name}.mender", sign_key=artifact_key)()
        return result.path, result.release_id

    return build


def ok(done: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def test_export_writes_an_artifact_mender_artifact_validates_and_reads(export, tmp_path):
    path, release = export(20, "r1")
    ok(subprocess.run(["mender-artifact", "validate", str(path)], capture_output=True, text=True))
    read = ok(subprocess.run(["mender-artifact", "read", str(path)], capture_output=True, text=True)).stdout
    assert f"Name: tiny-{release}" in read and f"Compatible devices: '[{DEVICE_TYPE}]'" in read and "Type:   perception-release" in read
    assert f"rootfs-image.perception.version: {release}" in read and "rootfs-image.perception.pipeline: tiny" in read
    assert '"release": "' + release + '"' in read and '"min_frames": 5' in read  # the meta-data the module reads
    files = payload_files(path)
    manifest = ReleaseManifest.from_json(files["manifest.json"].decode())
    assert manifest.release_id == release and list(files)[0] == "manifest.json"
    # One payload file per distinct object, named by its hash and holding exactly those bytes.
    objects = {entry.sha256 for entry in manifest.files.values()}
    assert set(files) - {"manifest.json"} == objects
    assert all(hashlib.sha256(files[sha]).hexdigest() == sha for sha in objects)
    assert {"sdk/store/objects.py", "pipeline/tiny.yaml", "artifacts/model.onnx"} <= set(manifest.files)


def test_install_commit_rollback_then_a_failed_health_check_and_a_missed_commit_window_keep_the_committed_release(export, device):
    """One device through a release's life: install and commit, install and roll back to the previous release; then,
    on the same committed release, a release failing its health check is refused, and a trial left past its commit
    window is rolled back (each install runs a health check: the three stories share the first install and commit)."""
    first, first_id = export(20, "r1")
    ok(device.install(first))
    state = device.state()
    assert state["current"] == first_id and state["committed"] is None and state["trial"]["owner"] == "mender"
    assert state["trial"]["state"] == "passed" and state["trial"]["stale"] is None  # no lease, and still live
    ok(device.mender("commit"))
    state = device.state()
    assert (state["current"], state["committed"], state["trial"]) == (first_id, first_id, None)
    assert device.artifact_name() == f"tiny-{first_id}"
    ReleaseManifest.load(device.store / "current").verify(device.store / "current")

    second, second_id = export(21, "r2")
    ok(device.install(second))
    assert (device.state()["current"], device.state()["committed"]) == (second_id, first_id)
    ok(device.mender("rollback"))
    state = device.state()
    assert (state["current"], state["committed"], state["trial"], state["history"]) == (first_id, first_id, None, [first_id])
    assert state["last_trial"]["outcome"] == "rolled back" and "ArtifactRollback" in state["last_trial"]["reason"]
    assert device.artifact_name() == f"tiny-{first_id}"

    # A release failing its health check is refused and the committed one stays.
    bad, bad_id = export(2, "bad")  # 2 frames; the health check needs 5
    done = device.install(bad)
    assert done.returncode != 0
    assert f"release {bad_id} failed its health check: only 2 frame(s) went through the pipeline" in done.stderr
    state = device.state()
    assert (state["current"], state["committed"], state["trial"], state["history"]) == (first_id, first_id, None, [first_id])
    assert state["last_trial"]["release"] == bad_id and state["last_trial"]["outcome"] == "rolled back"
    assert device.artifact_name() == f"tiny-{first_id}"  # Mender too: the failed artifact is not installed
    assert device.mender("commit").returncode == 2  # nothing in progress

    # A trial left past its commit window is rolled back, and `mender commit` fails.
    config = json.loads((device.etc / "perception-release.conf").read_text())
    (device.etc / "perception-release.conf").write_text(json.dumps({**config, "commit_window_s": 0.5}))
    third, third_id = export(22, "r3")
    ok(device.install(third))
    assert device.state()["current"] == third_id
    time.sleep(1)  # nobody committed within the window
    done = device.mender("commit")
    assert done.returncode != 0
    assert f"release {third_id} is not on trial on this device any more (it was rolled back: the trial ran past its deadline)" in done.stderr
    state = device.state()
    assert (state["current"], state["committed"], state["trial"]) == (first_id, first_id, None)
    assert device.artifact_name() == f"tiny-{first_id}"  # Mender rolled back too


def ecdsa_key(folder: Path) -> tuple[Path, Path]:
    key, public = folder / "artifact.key", folder / "artifact.pub"
    ok(subprocess.run(["openssl", "ecparam", "-genkey", "-name", "prime256v1", "-noout", "-out", str(key)], capture_output=True, text=True))
    ok(subprocess.run(["openssl", "ec", "-in", str(key), "-pubout", "-out", str(public)], capture_output=True, text=True))
    return key, public


def test_with_artifact_verify_key_mender_refuses_unsigned_and_tampered_and_installs_signed(export, device, tmp_path):
    key, public = ecdsa_key(tmp_path)
    device.configure(verify_key=public)
    unsigned, _ = export(20, "unsigned")
    done = device.install(unsigned)
    assert done.returncode != 0 and "expecting signed artifact, but no signature file found" in done.stderr
    signed, signed_id = export(20, "signed", artifact_key=key)
    ok(subprocess.run(["mender-artifact", "validate", "-k", str(public), str(signed)], capture_output=True, text=True))
    objects = sorted(name for name in payload_files(signed) if name != "manifest.json")
    tampered = tamper(signed, tmp_path / "tampered.mender", objects[0], lambda data: data + b"\n# changed on the way\n")
    done = device.install(tampered)
    assert done.returncode != 0 and "invalid signature: signer: verification failed" in done.stderr, done.stderr[-2000:]
    assert device.state()["current"] is None and device.artifact_name() == FACTORY  # nothing reached the store's pointers
    ok(device.install(signed))
    ok(device.mender("commit"))
    assert device.state()["committed"] == signed_id and device.artifact_name() == f"tiny-{signed_id}"


def test_a_device_trusting_a_release_key_refuses_unsigned_and_tampered_manifests_inside_artifacts(export, device, tmp_path):
    from sdk.store.signing import install_verify_key
    from tools.release.signing import verify_key_pem

    subprocess.run(["openssl", "genpkey", "-algorithm", "ed25519", "-out", str(tmp_path / "release.key")], check=True)
    pem, fingerprint = verify_key_pem(tmp_path / "release.key")
    install_verify_key(device.store, pem)

    unsigned, unsigned_id = export(20, "unsigned")
    done = device.install(unsigned)
    assert done.returncode != 0
    assert f"release {unsigned_id} is not signed; this device accepts only releases signed by verify_key {fingerprint}" in done.stderr
    assert not any((device.store / "store").iterdir())  # refused before any object was written

    signed, signed_id = export(20, "signed", sign_key=str(tmp_path / "release.key"))  # the target file's sign_key
    files = payload_files(signed)
    assert json.loads(files["manifest.json.sig"])["key"] == fingerprint

    def changed(data: bytes) -> bytes:  # same files, same release id: only the signature can tell
        manifest = json.loads(data)
        manifest["fingerprint"]["host_machine"] = "somewhere-else"
        return json.dumps(manifest, indent=2, sort_keys=True).encode() + b"\n"

    tampered = tamper(signed, tmp_path / "tampered.mender", "manifest.json", changed)
    done = device.install(tampered)
    assert done.returncode != 0
    assert f"release {signed_id}: its signature does not verify with key {fingerprint}" in done.stderr
    ok(device.install(signed))
    ok(device.mender("commit"))
    assert device.state()["committed"] == signed_id
    assert (device.store / "releases" / signed_id / "manifest.json.sig").is_file()  # kept for `store trial` to check again
