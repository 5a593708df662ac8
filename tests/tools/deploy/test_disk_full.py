"""A full disk on the target, for real: a small tmpfs as the store, filled by another writer between the space check
and the upload, so the kernel itself answers ENOSPC (over SFTP: the server's failure status). Also what a resumed
upload needs, stale partial uploads swept, and a refused SFTP write naming its reason."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from sdk.errors import ReleaseError, TargetError
from sdk.release import ReleaseManifest
from sdk.store.objects import ReleaseStore, size_text
from tests.tools.release.bundles import bundle_of
from tools.connect.sessions import LocalSession, open_session
from tools.release.bundle import runtime_files
from tools.release.stage import manifest_for, stage_release
from tools.targets import LocalTarget, resolve_target


@pytest.fixture()
def small_disk(tmp_path):
    """An 8 MB tmpfs, unmounted afterwards whatever happens."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    folder = tmp_path / "small"
    folder.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(folder)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount tmpfs here: {done.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def free(path: Path) -> int:
    return shutil.disk_usage(path).free


def share(room: int, fraction: float) -> int:
    """A fraction of the room, in whole 100 kB: a few bytes more or less never change a size_text."""
    return int(room * fraction) // 100_000 * 100_000


class FillsTheDisk:
    """A progress display that, as the upload starts (after the space check), lets another writer take `size` bytes."""

    def __init__(self, filler: Path, size: int) -> None:
        self.filler, self.size = filler, size

    def task(self, description: str, total: float | None = None):
        if description.startswith("sending"):
            self.filler.write_bytes(bytes(self.size))

        class Task:
            def advance(self, amount: float = 1) -> None:
                pass

            def done(self) -> None:
                pass

        return Task()


def stage(session, folder: Path, contents: dict[str, bytes], progress=None):
    bundle = bundle_of(folder, contents)
    return stage_release(session, bundle, manifest_for(bundle), progress)


def commit(root: Path, release_id: str) -> None:
    """The release passed its trial (the health run itself is not what these tests are about)."""
    store = ReleaseStore(root)
    with store.locked():
        store.begin_trial(release_id, token=None, owner="test", deadline_s=60)
        store.mark_passed(token=None, health={"healthy": True}, commit_within_s=60)
        store.commit(token=None)


def intact_current(root: Path) -> str:
    current = (root / "current").resolve()
    ReleaseManifest.load(current).verify(current)
    return current.name


def ssh_session(ssh_target, root: Path):
    ssh_target.write(remote_root=str(root))
    session = open_session(resolve_target("sim"))
    session.ensure_agent(runtime_files())
    return session


def test_ssh_disk_filling_during_the_upload_is_disk_full_and_the_partial_is_removed(ssh_target, small_disk, tmp_path):
    with ssh_session(ssh_target, small_disk) as session:
        first = stage(session, tmp_path / "a", {"pipeline/p.yaml": b"version: 1\n", "artifacts/m.bin": os.urandom(100_000)})
        commit(small_disk, first.release_id)
        room = free(small_disk)
        big = os.urandom(share(room, 0.8))  # passes the space check (80 % of the room, 5 % margin)...
        filling = FillsTheDisk(small_disk / "filler", share(room, 0.5))  # ...then another writer takes half of it
        with pytest.raises(ReleaseError) as caught:
            stage(session, tmp_path / "b", {"pipeline/p.yaml": b"version: 2\n", "artifacts/m.bin": big}, filling)
        message = caught.value.message
        assert message == f"disk full on sim: need {size_text(len(big))}, have {size_text(free(small_disk))}", message
        assert "\n" not in message and "free space on the target" in caught.value.hint
        partial = small_disk / "store" / f".upload-{hashlib.sha256(big).hexdigest()}"
        assert not partial.exists()  # a full disk's partial upload is not kept for a resume
        assert intact_current(small_disk) == first.release_id
        assert not list((small_disk / "releases").glob(".tmp-*"))
        # Room again: the next deploy goes through, sending the big object whole.
        (small_disk / "filler").unlink()
        again = stage(session, tmp_path / "b", {"pipeline/p.yaml": b"version: 2\n", "artifacts/m.bin": big})
        assert again.bytes_sent == len(big)
        commit(small_disk, again.release_id)
    assert intact_current(small_disk) == again.release_id


def test_ssh_resume_needs_room_only_for_the_rest_and_stale_uploads_are_swept(ssh_target, small_disk, tmp_path):
    with ssh_session(ssh_target, small_disk) as session:
        session.prepare()
        room = free(small_disk)
        big = os.urandom(share(room, 0.7))
        already = share(room, 0.5)
        store = small_disk / "store"
        (store / f".upload-{hashlib.sha256(big).hexdigest()}").write_bytes(big[:already])  # a cut upload of this release
        stale = store / f".upload-{hashlib.sha256(b'another release').hexdigest()}"
        stale.write_bytes(bytes(share(room, 0.35)))  # a cut upload of a release no longer deployed
        leftover = store / ".tmp-0123-4567"
        leftover.write_bytes(bytes(share(room, 0.05)))
        # Free now: 10 % of the room, less than the 21 % the rest needs. The whole object would need 74 %,
        # more than the 50 % there is once the stale upload and the leftover are gone.
        assert free(small_disk) < (len(big) - already) * 1.05 and len(big) * 1.05 > room - already
        result = stage(session, tmp_path / "b", {"pipeline/p.yaml": b"version: 1\n", "artifacts/m.bin": big})
        assert result.bytes_sent == len(big) - already + len(b"version: 1\n")  # resumed, not resent
        commit(small_disk, result.release_id)
    assert not stale.exists() and not leftover.exists() and not list(store.glob(".upload-*"))
    assert intact_current(small_disk) == result.release_id


def test_a_refused_write_on_the_device_names_its_reason(ssh_target, small_disk, tmp_path):
    """Not a full disk, not a cut link: the filesystem turns read-only as the upload starts."""

    class TurnsReadOnly(FillsTheDisk):
        def task(self, description: str, total: float | None = None):
            if description.startswith("sending"):
                subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True)
            return super().task("not sending")

    with ssh_session(ssh_target, small_disk) as session:
        first = stage(session, tmp_path / "a", {"pipeline/p.yaml": b"version: 1\n"})
        commit(small_disk, first.release_id)
        with pytest.raises(TargetError) as caught:
            stage(session, tmp_path / "b", {"pipeline/p.yaml": b"version: 2\n"}, TurnsReadOnly(small_disk, 0))
    message = caught.value.message
    assert message.startswith("sim: writing ") and "/store/.upload-" in message
    assert message.endswith("failed: Read-only file system (errno 30)"), message
    assert "connection lost" not in message and "status -1" not in message
    assert intact_current(small_disk) == first.release_id


def local_session(root: Path) -> LocalSession:
    return LocalSession(LocalTarget("local", root))


def test_local_disk_filling_during_the_copy_is_disk_full_and_leaves_nothing(small_disk, tmp_path):
    session = local_session(small_disk)
    first = stage(session, tmp_path / "a", {"pipeline/p.yaml": b"version: 1\n", "artifacts/m.bin": os.urandom(100_000)})
    commit(small_disk, first.release_id)
    room = free(small_disk)
    big = os.urandom(share(room, 0.8))
    filling = FillsTheDisk(small_disk / "filler", share(room, 0.5))
    with pytest.raises(ReleaseError) as caught:
        stage(session, tmp_path / "b", {"pipeline/p.yaml": b"version: 2\n", "artifacts/m.bin": big}, filling)
    assert caught.value.message == f"disk full on local: need {size_text(len(big))}, have {size_text(free(small_disk))}"
    store = small_disk / "store"
    assert not list(store.glob(".tmp-*")) and not (store / hashlib.sha256(big).hexdigest()).exists()
    assert intact_current(small_disk) == first.release_id
    (small_disk / "filler").unlink()
    again = stage(session, tmp_path / "b", {"pipeline/p.yaml": b"version: 2\n", "artifacts/m.bin": big})
    commit(small_disk, again.release_id)
    assert intact_current(small_disk) == again.release_id


def test_local_space_check_refuses_up_front_in_the_same_words(small_disk, tmp_path):
    session = local_session(small_disk)
    first = stage(session, tmp_path / "a", {"pipeline/p.yaml": b"version: 1\n"})
    commit(small_disk, first.release_id)
    before = sorted(p.name for p in (small_disk / "store").iterdir())
    room = free(small_disk)
    big = bytes(share(room, 1.2))
    with pytest.raises(ReleaseError) as caught:
        stage(session, tmp_path / "b", {"pipeline/p.yaml": b"version: 2\n", "artifacts/m.bin": big})
    need = (len(big) + len(b"version: 2\n")) * 1.05
    assert caught.value.message == f"disk full on local: need {size_text(need)}, have {size_text(room)}"
    assert sorted(p.name for p in (small_disk / "store").iterdir()) == before
    assert intact_current(small_disk) == first.release_id
