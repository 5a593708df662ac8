"""The health check of a Mender trial is the release's own (its signed pipeline file's `health:`); the artifact's
meta-data, outside the SDK's signature, must agree (sdk/store/mender.py: signed_health)."""

from __future__ import annotations

import builtins
import hashlib

import pytest

from sdk.errors import ReleaseError
from sdk.release import FileEntry, ReleaseManifest, pipeline_health_of
from sdk.store.mender import Payload, signed_health
from sdk.store.objects import ReleaseStore

HEALTH = "version: 1\nname: p\nhealth:\n  min_frames: 20  # a release that must prove itself on 20 frames\n  timeout_s: 60\nsources: []\n"


def assembled(tmp_path, pipeline: str) -> tuple[ReleaseStore, str]:
    store = ReleaseStore(tmp_path / "root")
    store.ensure()
    data = pipeline.encode()
    sha = hashlib.sha256(data).hexdigest()
    (tmp_path / "p.yaml").write_bytes(data)
    store.add_file(tmp_path / "p.yaml", sha)
    manifest = ReleaseManifest({"pipeline/p.yaml": FileEntry(sha, len(data))}, "pipeline/p.yaml", "artifacts", {})
    with store.locked():
        store.assemble(manifest)
    return store, manifest.release_id


CASES = [(1, 60.0, True), (19, 60.0, True), (20, 3600.0, True), (20, 60.0, False), (25, 60.0, False)]


@pytest.mark.parametrize(("frames", "timeout", "refused"), CASES)
def test_a_rewrapped_artifacts_health_policy_is_refused(tmp_path, frames, timeout, refused):
    store, release = assembled(tmp_path, HEALTH)
    payload = Payload(release, "p", frames, timeout)
    if refused:
        said = f"asks for a health check of {frames} frames within {timeout:g} s; the release's signed pipeline states 20 frames within 60 s"
        with pytest.raises(ReleaseError, match=said):
            signed_health(store, release, payload)
    else:
        policy = signed_health(store, release, payload)
        assert (policy.min_frames, policy.timeout_s) == (frames, 60.0)  # a target file may only raise the minimum


def test_without_a_health_block_the_schemas_defaults_are_what_is_signed(tmp_path):
    store, release = assembled(tmp_path, "version: 1\nname: p\n")
    assert signed_health(store, release, Payload(release, "p", 5, 120.0)).min_frames == 5
    with pytest.raises(ReleaseError, match="states 5 frames within 120 s"):
        signed_health(store, release, Payload(release, "p", 1, 120.0))


def test_an_edited_pipeline_file_is_refused_before_its_health_is_read(tmp_path):
    store, release = assembled(tmp_path, HEALTH)
    path = store.release_dir(release) / "pipeline/p.yaml"
    path.chmod(0o644)
    path.write_text(HEALTH.replace("20", "01"))
    with pytest.raises(ReleaseError, match="does not match its manifest"):
        signed_health(store, release, Payload(release, "p", 1, 60.0))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (HEALTH, {"min_frames": 20, "timeout_s": 60.0}),
        ("name: p\nhealth: {min_frames: 7, timeout_s: 30.5}  # flow style\n", {"min_frames": 7, "timeout_s": 30.5}),
        ("name: p\nhealth:\n  timeout_s: 90\n\n  # a comment\n  min_frames: 3\nsinks: []\n", {"min_frames": 3, "timeout_s": 90.0}),
        ("name: p\nsinks: []\n", {}),
    ],
)
def test_the_health_block_reads_the_same_without_a_yaml_parser(monkeypatch, text, expected):
    assert pipeline_health_of(text) == expected
    real = builtins.__import__

    def no_yaml(name, *args, **kwargs):
        if name == "yaml":
            raise ImportError("the device's bare Python has no PyYAML")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_yaml)
    assert pipeline_health_of(text) == expected
