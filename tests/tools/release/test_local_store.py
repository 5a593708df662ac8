"""The release store: content addressing, nothing sent twice, damaged objects never activated, atomic switch."""

from __future__ import annotations

from pathlib import Path

import pytest

from sdk.errors import ReleaseError
from sdk.release import ReleaseManifest
from sdk.store.objects import ReleaseStore
from tests.tools.release.bundles import bundle_of
from tools.connect.sessions import LocalSession
from tools.release.bundle import Bundle
from tools.release.stage import manifest_for, stage_release
from tools.targets import LocalTarget


def passed(store: ReleaseStore, release_id: str) -> None:
    """A trial that passed its health check, committed (the health run itself is tested in tests/sdk/test_trial.py)."""
    store.begin_trial(release_id, token=None, owner="test", deadline_s=60)
    store.mark_passed(token=None, health={"healthy": True}, commit_within_s=60)
    store.commit(token=None)


def stage(store: ReleaseStore, bundle: Bundle):
    """Stage through the local session (as deploy does) and commit the release."""
    result = stage_release(LocalSession(LocalTarget("local", store.root)), bundle, manifest_for(bundle))
    if store.committed() != result.release_id:  # a redeploy of the committed release has nothing to try
        passed(store, result.release_id)
    return result


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
    result = stage(store, bundle_of(src, FILES))
    assert (result.files, result.files_sent, result.bytes_sent) == (4, 3, 100_011)  # two empty files share one object
    release = store.release_dir(result.release_id)
    assert store.current() == result.release_id and (store.root / "current").resolve() == release.resolve()
    ReleaseManifest.load(release).verify(release)
    assert (release / "artifacts" / "model.onnx").stat().st_ino == store.object_path(
        ReleaseManifest.load(release).files["artifacts/model.onnx"].sha256
    ).stat().st_ino
    assert oct(next(store.objects.iterdir()).stat().st_mode & 0o777) == "0o444"


def test_restaging_the_same_content_sends_nothing(store, src):
    first = stage(store, bundle_of(src, FILES))
    before = objects(store)
    second = stage(store, bundle_of(src, FILES))
    assert second.release_id == first.release_id
    assert (second.files_sent, second.bytes_sent) == (0, 0)
    assert objects(store) == before
    assert store.current() == first.release_id and store.previous() is None


def test_a_changed_file_is_the_only_one_sent(store, src):
    first = stage(store, bundle_of(src, FILES))
    second = stage(store, bundle_of(src, {**FILES, "pipeline/p.yaml": b"version: 1\n# changed\n"}))
    assert second.release_id != first.release_id
    assert (second.files_sent, second.bytes_sent) == (1, len(b"version: 1\n# changed\n"))
    assert store.current() == second.release_id and store.previous() == first.release_id
    assert sorted(p.name for p in store.releases.iterdir()) == sorted([first.release_id, second.release_id])


def test_a_damaged_store_object_is_detected_resent_and_never_activated(store, src):
    first = stage(store, bundle_of(src, FILES))
    manifest = ReleaseManifest.load(store.release_dir(first.release_id))
    damaged = store.object_path(manifest.files["artifacts/model.onnx"].sha256)
    damaged.chmod(0o644)
    with damaged.open("r+b") as handle:  # same length, different bytes: only the hash can tell
        handle.write(b"X")
    with pytest.raises(ReleaseError, match="does not match its manifest"):
        manifest.verify(store.release_dir(first.release_id))
    # The next deploy of a different release needs the same object: it is re-sent, not linked.
    second = stage(store, bundle_of(src, {**FILES, "sdk/x.py": b"# new\n"}))
    assert second.files_sent == 2
    release = store.release_dir(second.release_id)
    ReleaseManifest.load(release).verify(release)


def test_a_truncated_release_is_rebuilt_before_activation(store, src):
    first = stage(store, bundle_of(src, FILES))
    release = store.release_dir(first.release_id)
    (release / "sdk" / "x.py").unlink()
    assert not store.has_release(ReleaseManifest.load(release))
    again = stage(store, bundle_of(src, FILES))
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
    first = stage(store, bundle_of(src, FILES))
    (store.releases / ".tmp-deadbeefdeadbeef-1").mkdir()
    (store.objects / f".tmp-{'a' * 64}-1").write_bytes(b"half")
    (store.root / ".tmp-current-1").symlink_to("releases/nowhere")
    stage(store, bundle_of(src, FILES))
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


def test_a_trial_is_undone_by_recover_once_it_can_no_longer_finish_and_kept_by_commit(store, src):
    first = stage(store, bundle_of(src, FILES))
    second_bundle = bundle_of(src, {**FILES, "sdk/x.py": b"# two\n"})
    second = stage_release(LocalSession(LocalTarget("local", store.root)), second_bundle, manifest_for(second_bundle))
    store.begin_trial(second.release_id, token=None, owner="test", deadline_s=0.0)
    trial = store.trial()
    assert store.current() == second.release_id and store.committed() == first.release_id
    assert (trial["release"], trial["fallback"], trial["state"]) == (second.release_id, first.release_id, "running")
    assert store.recover() == second.release_id  # past its deadline (or its deployer is gone): rolled back
    assert store.current() == first.release_id and store.trial() is None and store.history() == [first.release_id]
    assert store.status()["last_trial"]["outcome"] == "rolled back"
    store.begin_trial(second.release_id, token=None, owner="test", deadline_s=60)
    with pytest.raises(ReleaseError, match="has not passed its health check"):
        store.commit(token=None)  # nothing unchecked is ever committed
    store.mark_passed(token=None, health={"healthy": True}, commit_within_s=60)
    store.commit(token=None)
    assert store.recover() is None and store.current() == second.release_id == store.committed()
    assert store.history() == [first.release_id, second.release_id] and store.previous() == first.release_id


def test_rollback_walks_back_through_the_history_and_checks_every_byte(store, src):
    ids = [stage(store, bundle_of(src, {**FILES, "sdk/x.py": f"# {k}\n".encode()})).release_id for k in range(3)]
    assert store.rollback() == ids[1] and store.current() == ids[1] == store.committed() and store.previous() == ids[0]
    damaged = store.release_dir(ids[0]) / "pipeline" / "p.yaml"
    damaged.chmod(0o644)
    damaged.write_bytes(b"version: 2\n")  # same length, other bytes
    with pytest.raises(ReleaseError, match=f"cannot go back to release {ids[0]}: pipeline/p.yaml does not match .*; nothing was changed"):
        store.rollback()
    assert store.current() == ids[1] == store.committed()
    damaged.write_bytes(b"version: 1\n")
    assert store.rollback() == ids[0] and store.previous() is None
    with pytest.raises(ReleaseError, match="only committed release on the target: there is no earlier one"):
        store.rollback()


def test_prune_keeps_current_previous_and_drops_unused_objects(store, src):
    ids = [stage(store, bundle_of(src, {**FILES, "sdk/x.py": f"# {k}\n".encode()})).release_id for k in range(5)]
    removed = store.prune(keep=2)
    assert sorted(removed) == sorted(ids[:3])
    assert sorted(p.name for p in store.releases.iterdir()) == sorted(ids[3:])
    for release in ids[3:]:
        ReleaseManifest.load(store.release_dir(release)).verify(store.release_dir(release))
    linked = {e.sha256 for r in ids[3:] for e in ReleaseManifest.load(store.release_dir(r)).files.values()}
    assert {p.name for p in store.objects.iterdir()} == linked


def test_the_deploy_lock_names_its_holder_and_dies_with_it(store):
    held = store.acquire("host-a:1")
    with pytest.raises(ReleaseError, match="the target is busy: host-a:1 since"):
        store.acquire("host-b:2")
    held.close()  # what the kernel does when the holding process dies
    store.acquire("host-b:2").close()
