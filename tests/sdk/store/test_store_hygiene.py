"""Store hygiene: release file names checked once in their plain form; objects only ever regular files, never a
link followed or a FIFO opened (which would hang with the store's mutex held); a manifest never written through a
hard link into a shared object."""

from __future__ import annotations

import hashlib
import json
import os
import threading

import pytest

from sdk.errors import ReleaseError
from sdk.release import FileEntry, ReleaseManifest
from sdk.store.objects import ReleaseStore

SHA = "a" * 64


def manifest_text(name: str) -> str:
    manifest = ReleaseManifest({"pipeline/p.yaml": FileEntry(SHA, 1)}, "pipeline/p.yaml", "artifacts", {})
    data = json.loads(manifest.to_json())
    data["files"] = {name: {"sha256": SHA, "size": 1}}
    listing = ReleaseManifest({name: FileEntry(SHA, 1)}, "pipeline/p.yaml", "artifacts", {}) if isinstance(name, str) else None
    data["release"] = listing.release_id if listing else "x"
    return json.dumps(data)


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("./manifest.json", "plain form"),
        ("manifest.json", "own manifest"),
        ("manifest.json.sig", "own manifest"),
        ("manifest.json/x", "under the release's manifest"),
        ("manifest.json.sig/x", "under the release's manifest or its signature"),
        (".tmp-manifest.json", "kept for the store's own temporary files"),
        (".tmp-manifest.json.sig-123", "kept for the store's own temporary files"),
        ("", "empty"),
        (".", "plain form"),
        ("sdk/./x.py", "plain form"),
        ("sdk//x.py", "plain form"),
        ("sdk/x.py/", "plain form"),
        ("../x", "leaves the release folder"),
        ("/etc/passwd", "leaves the release folder"),
        ("sdk/\x00.py", "NUL"),
        ("sdk/\n.py", "control"),
        ("a" * 300, "longer than allowed"),
        ("/".join(["d"] * 600), "longer than allowed"),
    ],
)
def test_odd_release_file_names_are_refused_at_the_manifest(name, why):
    with pytest.raises(ReleaseError, match="file name") as raised:
        ReleaseManifest.from_json(manifest_text(name))
    assert why in raised.value.message


def test_a_plain_name_is_accepted():
    assert list(ReleaseManifest.from_json(manifest_text("sdk/service/x.py")).files) == ["sdk/service/x.py"]


@pytest.fixture()
def store(tmp_path):
    store = ReleaseStore(tmp_path / "root")
    store.ensure()
    return store


def test_a_link_planted_as_an_object_is_never_followed(store, tmp_path):
    outside = tmp_path / "outside"
    outside.write_bytes(b"x")
    sha = hashlib.sha256(b"x").hexdigest()
    os.symlink(outside, store.object_path(sha))
    assert store.has_object(sha, 1) is False and store.has_object(sha, 1, verify=True) is False
    assert not store.object_path(sha).is_symlink() and outside.read_bytes() == b"x"  # removed, its target untouched


def test_a_fifo_planted_as_an_object_does_not_hang_the_store(store):
    sha = hashlib.sha256(b"").hexdigest()
    os.mkfifo(store.object_path(sha))
    answer = []
    worker = threading.Thread(target=lambda: answer.append(store.has_object(sha, 0, verify=True)), daemon=True)
    worker.start()
    worker.join(timeout=10)
    assert answer == [False] and not store.object_path(sha).exists()


def test_the_manifest_is_a_new_file_never_written_through_a_shared_object(store, tmp_path):
    """A manifest listing `./manifest.json` (refused by the parser above; made here directly, as an earlier SDK's
    parser let it through) links an object where the manifest goes: assembling replaces that link with a new file,
    and the shared object, which the committed release may also link, keeps its bytes."""
    data = b"shared object bytes\n"
    sha = hashlib.sha256(data).hexdigest()
    source = tmp_path / "f"
    source.write_bytes(data)
    store.add_file(source, sha)
    manifest = ReleaseManifest({"./manifest.json": FileEntry(sha, len(data))}, "pipeline/p.yaml", "artifacts", {})
    folder = store.assemble(manifest)
    assert store.object_path(sha).read_bytes() == data
    assert json.loads((folder / "manifest.json").read_text())["release"] == manifest.release_id
