"""The release store: content addressing, nothing sent twice, damaged objects never activated, atomic switch."""

from __future__ import annotations

from pathlib import Path

import pytest

from sdk.errors import ReleaseError
from sdk.release import ReleaseManifest
from sdk.store import ReleaseStore
from tools.release.bundle import Bundle
from tools.release.local import stage_release


def bundle_of(folder: Path, contents: dict[str, bytes]) -> Bundle:
    files = {}
    for name, data in contents.items():
        path = folder / name.replace("/", "__")
        path.write_bytes(data)
        files[name] = path
    return Bundle(files, "pipeline/p.yaml", "artifacts", {"test": True})


@pytest.fixture()
def store(tmp_path) -> ReleaseStore:
    return ReleaseStore(tmp_path / "target")


@pytest.fixture()
def src(tmp_path) -> Path:
    folder = tmp_path / "src"
    folder.mkdir()
    return folder


FILES = {"pipeline/p.yaml": b"version: 1\n", "artifacts/model.onnx": b"M" * 100_000, "sdk/__init__.py": b"", "sdk/x.py": b""}


def objects(store: ReleaseStore) -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in store.objects.iterdir()}


def test_first_stage_sends_each_distinct_content_once(store, src):
    result = stage_release(store, bundle_of(src, FILES))
    assert (result.files, result.files_sent, result.bytes_sent) == (4, 3, 100_011)  # two empty files share one object
    release = store.release_dir(result.release_id)
    assert store.current() == result.release_id and (store.root / "current").resolve() == release.resolve()
    ReleaseManifest.load(release).verify(release)
    assert (release / "artifacts" / "model.onnx").stat().st_ino == store.object_path(
        ReleaseManifest.load(release).files["artifacts/model.onnx"].sha256
    ).stat().st_ino
    assert oct(next(store.objects.iterdir()).stat().st_mode & 0o777) == "0o444"


def test_restaging_the_same_content_sends_nothing(store, src):
    first = stage_release(store, bundle_of(src, FILES))
    before = objects(store)
    second = stage_release(store, bundle_of(src, FILES))
    assert second.release_id == first.release_id
    assert (second.files_sent, second.bytes_sent) == (0, 0)
    assert objects(store) == before
    assert store.current() == first.release_id and store.previous() is None


def test_a_changed_file_is_the_only_one_sent(store, src):
    first = stage_release(store, bundle_of(src, FILES))
    second = stage_release(store, bundle_of(src, {**FILES, "pipeline/p.yaml": b"version: 1\n# changed\n"}))
    assert second.release_id != first.release_id
    assert (second.files_sent, second.bytes_sent) == (1, len(b"version: 1\n# changed\n"))
    assert store.current() == second.release_id and store.previous() == first.release_id
    assert sorted(p.name for p in store.releases.iterdir()) == sorted([first.release_id, second.release_id])


def test_a_damaged_store_object_is_detected_resent_and_never_activated(store, src):
    first = stage_release(store, bundle_of(src, FILES))
    manifest = ReleaseManifest.load(store.release_dir(first.release_id))
    damaged = store.object_path(manifest.files["artifacts/model.onnx"].sha256)
    damaged.chmod(0o644)
    with damaged.open("r+b") as handle:  # same length, different bytes: only the hash can tell
        handle.write(b"X")
    with pytest.raises(ReleaseError, match="does not match its manifest"):
        manifest.verify(store.release_dir(first.release_id))
    # The next deploy of a different release needs the same object: it is re-sent, not linked.
    second = stage_release(store, bundle_of(src, {**FILES, "sdk/x.py": b"# new\n"}))
    assert second.files_sent == 2
    release = store.release_dir(second.release_id)
    ReleaseManifest.load(release).verify(release)


def test_a_truncated_release_is_rebuilt_before_activation(store, src):
    first = stage_release(store, bundle_of(src, FILES))
    release = store.release_dir(first.release_id)
    (release / "sdk" / "x.py").unlink()
    assert not store.has_release(ReleaseManifest.load(release))
    again = stage_release(store, bundle_of(src, FILES))
    assert again.release_id == first.release_id
    ReleaseManifest.load(release).verify(release)


def test_an_object_that_arrives_corrupt_is_not_installed(store, src):
    store.ensure()
    temporary = store.temporary_object("0" * 64)
    temporary.write_bytes(b"payload")
    with pytest.raises(ReleaseError, match="arrived corrupt"):
        store.install_object(temporary, "0" * 64)
    assert list(store.objects.iterdir()) == []


def test_leftovers_of_a_crash_are_swept_and_never_reachable(store, src):
    first = stage_release(store, bundle_of(src, FILES))
    (store.releases / ".tmp-deadbeefdeadbeef-1").mkdir()
    (store.objects / f".tmp-{'a' * 64}-1").write_bytes(b"half")
    (store.root / ".tmp-current-1").symlink_to("releases/nowhere")
    stage_release(store, bundle_of(src, FILES))
    assert [p.name for p in store.root.glob(".tmp-*")] == []
    assert [p.name for p in store.releases.iterdir()] == [first.release_id]


def test_manifest_rejects_names_leaving_the_release(tmp_path):
    folder = tmp_path / "r"
    folder.mkdir()
    from sdk.release import FileEntry

    manifest = ReleaseManifest({"../escape": FileEntry("0" * 64, 1)}, "p.yaml", "artifacts", {})
    (folder / "manifest.json").write_text(manifest.to_json())
    with pytest.raises(ReleaseError, match="leaves the release folder"):
        ReleaseManifest.load(folder)


def test_ids_and_object_names_are_validated(store):
    with pytest.raises(ReleaseError):
        store.release_dir("../../etc")
    with pytest.raises(ReleaseError):
        store.object_path("not-a-hash")
