"""Every start hashes every byte of the release (sdk/store/verify.py): no cache decides, nothing the service writes
counts, nothing is written, and no link or special file is followed or blocks a start."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from sdk.errors import ReleaseError
from sdk.release import FileEntry, ReleaseManifest
from sdk.store.objects import ReleaseStore
from sdk.store.startable import resolve_startable
from sdk.store.verify import verify_release

REPO = Path(__file__).resolve().parents[3]
PIPELINE = b"version: 1\nname: p\nthreshold: 0.3\n"


def committed_store(root: Path, label: str = "one", pipeline: bytes = PIPELINE, extra: dict | None = None) -> tuple[ReleaseStore, str]:
    """A store whose one committed release holds a pipeline file and a model (the health run is tested elsewhere)."""
    store = ReleaseStore(root)
    store.ensure()
    files = {}
    for name, data in {"pipeline/p.yaml": pipeline, "artifacts/model.onnx": label.encode() * 64, **(extra or {})}.items():
        sha = hashlib.sha256(data).hexdigest()
        source = root.parent / f"{label}-{sha[:8]}"
        source.write_bytes(data)
        store.add_file(source, sha)
        files[name] = FileEntry(sha, len(data))
    manifest = ReleaseManifest(files, "pipeline/p.yaml", "artifacts", {"label": label})
    with store.locked():
        store.assemble(manifest)
        store.begin_trial(manifest.release_id, token=None, owner="test", deadline_s=600)
        store.mark_passed(token=None, health={"healthy": True}, commit_within_s=600)
        store.commit(token=None, if_damaged="refuse")
    return store, manifest.release_id


def old_cache_entry(path: Path, digest: str) -> tuple[str, list]:
    """What an earlier SDK's `service/verified.json` held for a file: its identity and a hash to take on trust."""
    st = os.lstat(path)
    return f"{st.st_dev}:{st.st_ino}", [st.st_size, st.st_mtime_ns, st.st_ctime_ns, digest]


def edit_in_place(path: Path, old: bytes, new: bytes) -> None:
    """The same length, through the store object's hard link (as a writer of the object would)."""
    os.chmod(path, 0o644)
    path.write_bytes(path.read_bytes().replace(old, new))


def test_a_forged_entry_in_an_earlier_sdks_cache_never_lets_edited_bytes_start(tmp_path):
    store, release = committed_store(tmp_path / "root")
    pipeline = store.release_dir(release) / "pipeline/p.yaml"
    expected = hashlib.sha256(PIPELINE).hexdigest()
    edit_in_place(pipeline, b"0.3", b"0.1")
    cache = store.root / "service" / "verified.json"
    cache.parent.mkdir(exist_ok=True)
    cache.write_text(json.dumps(dict([old_cache_entry(pipeline, expected)])))  # forged: "these bytes hash as listed"
    with pytest.raises(ReleaseError, match=r"pipeline/p.yaml does not match its manifest \(changed on disk\)"):
        resolve_startable(store, repair=False)
    assert json.loads(cache.read_text()) == dict([old_cache_entry(pipeline, expected)])  # ignored, and never written


def test_a_start_writes_nothing_and_never_through_a_planted_link(tmp_path):
    """The service's writable folder with `.verified.json.<pid>.partial` links (an earlier SDK saved its cache through
    them as root) and a FIFO as verified.json (it hung every start): the check reads neither and writes nowhere."""
    store, release = committed_store(tmp_path / "root")
    service = store.root / "service"
    service.mkdir(exist_ok=True)
    decoy = tmp_path / "ld.so.preload"
    decoy.write_text("untouched\n")
    for pid in {os.getpid(), os.getpid() + 1}:
        os.symlink(decoy, service / f".verified.json.{pid}.partial")
    os.mkfifo(service / "verified.json")
    before = sorted(os.listdir(service))
    answer = []
    worker = threading.Thread(target=lambda: answer.append(resolve_startable(store, repair=False).release), daemon=True)
    worker.start()
    worker.join(timeout=60)  # a FIFO read would block for ever; the check reads none
    if worker.is_alive():
        with open(service / "verified.json", "wb"):  # lets the blocked reader go, so that nothing outlives this test
            pass
        worker.join(timeout=60)
        pytest.fail("the start blocked on a FIFO in the service's folder")
    assert answer == [release]
    assert decoy.read_text() == "untouched\n" and sorted(os.listdir(service)) == before


def run_check(folder: Path, timeout: float = 60) -> subprocess.CompletedProcess:
    """verify_release in a child process, so that a check that blocks fails this test instead of hanging it."""
    script = "import sys; sys.path.insert(0, sys.argv[1]); from sdk.store.verify import verify_release; verify_release(sys.argv[2])"
    try:
        return subprocess.run([sys.executable, "-c", script, str(REPO), str(folder)], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the check of {folder} blocked for {timeout} s")


@pytest.mark.parametrize("where", ["pipeline/p.yaml", "manifest.json"])
def test_a_fifo_in_the_release_is_refused_without_blocking(tmp_path, where):
    store, release = committed_store(tmp_path / "root")
    folder = store.release_dir(release)
    os.unlink(folder / where)
    os.mkfifo(folder / where)
    done = run_check(folder)
    assert done.returncode != 0 and "not a regular file" in done.stderr, done.stderr


@pytest.mark.parametrize("where", ["state.json", "trial.json", "releases/{release}/manifest.json.sig"])
def test_a_fifo_among_the_stores_records_never_blocks_a_start(tmp_path, where):
    """Every record a start reads is read as a regular file or not at all: a start is bounded in time."""
    store, release = committed_store(tmp_path / "root")
    path = store.root / where.format(release=release)
    path.unlink(missing_ok=True)
    os.mkfifo(path)
    script = (
        "import sys; sys.path.insert(0, sys.argv[1]); from sdk.errors import SdkError; from sdk.store.objects import ReleaseStore; "
        "from sdk.store.startable import resolve_startable\ntry: print(resolve_startable(ReleaseStore(sys.argv[2]), repair=False).release)\n"
        "except SdkError as exc: print('refused:', exc.message)"
    )
    try:
        done = subprocess.run([sys.executable, "-c", script, str(REPO), str(store.root)], capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"a FIFO as {where} blocked the start")
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr  # an answer, never a hang or a traceback


def test_a_link_in_the_release_is_refused_and_not_read(tmp_path):
    store, release = committed_store(tmp_path / "root")
    folder = store.release_dir(release)
    target = tmp_path / "elsewhere.yaml"
    target.write_bytes(PIPELINE)  # the very bytes listed: a link is refused for what it is, not for its content
    os.unlink(folder / "pipeline/p.yaml")
    os.symlink(target, folder / "pipeline/p.yaml")
    with pytest.raises(ReleaseError, match=r"pipeline/p.yaml is not a regular file \(a link or a special file\)"):
        verify_release(folder)


def test_a_file_longer_than_listed_is_refused_before_it_is_read(tmp_path):
    store, release = committed_store(tmp_path / "root")
    pipeline = store.release_dir(release) / "pipeline/p.yaml"
    os.chmod(pipeline, 0o644)
    with pipeline.open("ab") as handle:
        handle.write(b"x" * 100)
    with pytest.raises(ReleaseError, match=r"does not match its manifest \(\d+ bytes, listed \d+\)"):
        verify_release(store.release_dir(release))


@pytest.fixture()
def ext4_store(tmp_path):
    """A store on its own ext4 file system, on a loop device this test attaches and detaches (root only)."""
    if os.geteuid() != 0 or not shutil.which("losetup") or not shutil.which("mkfs.ext4"):
        pytest.skip("needs root, losetup and mkfs.ext4 to put a store on a file system of its own")
    image, mount = tmp_path / "ext4.img", tmp_path / "mnt"
    mount.mkdir()
    with image.open("wb") as handle:
        handle.truncate(16 << 20)
    subprocess.run(["mkfs.ext4", "-q", str(image)], check=True, timeout=60)
    attached = subprocess.run(["losetup", "--find", "--show", str(image)], capture_output=True, text=True, timeout=60)
    if attached.returncode != 0:
        pytest.skip(f"no loop device here: {attached.stderr.strip()}")
    device = attached.stdout.strip()
    mounted = False
    try:
        subprocess.run(["mount", device, str(mount)], check=True, timeout=60)
        mounted = True
        yield device, mount
    finally:
        if mounted and os.path.ismount(mount):
            subprocess.run(["umount", str(mount)], timeout=60)
        subprocess.run(["losetup", "--detach", device], timeout=60)


def test_a_byte_flipped_under_the_file_system_is_found_at_the_next_start(ext4_store, tmp_path):
    """Bit rot, a failing eMMC: the byte changes on the medium, no time stamp or inode moves. A check that trusted the
    file's identity (an earlier SDK's cache) ran the changed pipeline; hashing every byte refuses it."""
    device, mount = ext4_store
    marker = b"threshold: 0.3 # marker-7f3a9c\n"
    store, release = committed_store(mount / "root", pipeline=b"version: 1\nname: p\n" + marker)
    pipeline = store.release_dir(release) / "pipeline/p.yaml"
    identity = os.lstat(pipeline)
    (store.root / "service").mkdir(exist_ok=True)  # the service's folder, where an earlier SDK kept its hash cache
    assert resolve_startable(store, repair=False).release == release
    subprocess.run(["umount", str(mount)], check=True, timeout=60)
    with open(device, "r+b", buffering=0) as disk:  # the block device, under the file system
        data = disk.read()
        offset = data.index(marker) + len(b"threshold: 0.")
        disk.seek(offset)
        disk.write(b"1")
        os.fsync(disk.fileno())
    subprocess.run(["mount", device, str(mount)], check=True, timeout=60)
    after = os.lstat(pipeline)
    same = ("st_dev", "st_ino", "st_size", "st_mtime_ns", "st_ctime_ns")
    assert [getattr(after, k) for k in same] == [getattr(identity, k) for k in same]  # nothing a cache could key on moved
    assert b"threshold: 0.1" in pipeline.read_bytes()
    with pytest.raises(ReleaseError, match=r"pipeline/p.yaml does not match its manifest \(changed on disk\)"):
        resolve_startable(store, repair=False)


def a_wheel() -> bytes:
    import io
    import zipfile

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as wheel:
        wheel.writestr("shipped.py", "WHERE = 'release wheel'\n")
        wheel.writestr("shipped-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: shipped\nVersion: 1.0\n")
    return buffer.getvalue()


@pytest.mark.parametrize("change", ["edited", "planted", "removed", "relinked"])
def test_the_releases_offline_environment_is_checked_against_the_record_of_its_build(tmp_path, change):
    store, release = committed_store(tmp_path / "root", extra={"wheels/shipped-1.0-py3-none-any.whl": a_wheel()})
    python = store.build_env(release)
    assert python is not None and resolve_startable(store, repair=False).notes == ()
    site = next(store.env_dir(release).glob("lib/python*/site-packages"))
    if change == "edited":
        (site / "shipped.py").write_text("WHERE = 'edited'\n")
        why = "shipped.py does not match its record"
    elif change == "planted":
        (site / "zz-planted.pth").write_text("import os\n")  # a .pth runs at every interpreter start
        why = "zz-planted.pth is not part of it"
    elif change == "removed":
        (site / "shipped.py").unlink()
        why = "shipped.py is missing"
    else:
        python.unlink()
        python.symlink_to("/bin/sh")
        why = "bin/python does not match its record"
    with pytest.raises(ReleaseError, match=f"the release's environment .*{why}"):
        resolve_startable(store, repair=False)


def test_an_environment_an_earlier_sdk_built_starts_with_a_note(tmp_path):
    store, release = committed_store(tmp_path / "root", extra={"wheels/shipped-1.0-py3-none-any.whl": a_wheel()})
    store.build_env(release)
    (store.env_dir(release) / ".complete").write_text("shipped-1.0-py3-none-any.whl\n")  # what an earlier SDK wrote
    chosen = resolve_startable(store, repair=False)
    assert chosen.release == release and any("built by an earlier SDK" in note for note in chosen.notes)
