"""Only checked bytes start, on the store's start path (`python -m sdk store startable`: what `sdk start`, the
service's every restart and the systemd unit's start resolve through) and the runtime's own check (`sdk run
--release`): a committed file edited in place to the same length (only its hash can tell), and a file planted
into a folder the manifest lists (only "nothing unlisted" can tell), are each refused by name.

The releases are small (a pipeline file, a model, two modules of `sdk/`), staged through the local session as a
deploy stages them and committed (the health run itself is tested elsewhere); nothing is started, so each case is
the check alone.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sdk.errors import ReleaseError
from sdk.store.activation import STATE_FILE
from sdk.store.objects import ReleaseStore
from sdk.store.startable import allowed_to_run
from tools.connect.sessions import LocalSession
from tools.release.bundle import Bundle
from tools.release.stage import manifest_for, stage_release
from tools.targets import LocalTarget

REPO = Path(__file__).resolve().parents[3]


def staged(root: Path, folder: Path, label: str) -> str:
    folder.mkdir(exist_ok=True)
    files = {}
    contents = {
        "pipeline/p.yaml": f"version: 1\n# release {label}\n".encode(),
        "artifacts/model.onnx": b"M" * 4096,
        "sdk/__init__.py": b"",
        "sdk/extra.py": f"LABEL = {label!r}\n".encode(),
    }
    for name, data in contents.items():
        path = folder / f"{label}-{name.replace('/', '_')}"
        path.write_bytes(data)
        files[name] = path
    bundle = Bundle(files, "pipeline/p.yaml", "artifacts", {})
    return stage_release(LocalSession(LocalTarget("local", root)), bundle, manifest_for(bundle)).release_id


def commit(store: ReleaseStore, release: str) -> None:
    with store.locked():
        store.begin_trial(release, token=None, owner="test", deadline_s=600)
        store.mark_passed(token=None, health={"healthy": True}, commit_within_s=600)
        store.commit(token=None)


@pytest.fixture()
def two_committed(tmp_path):
    """A store with A then B committed (B the committed release)."""
    root = tmp_path / "target"
    store = ReleaseStore(root)
    a = staged(root, tmp_path / "src", "A")
    commit(store, a)
    b = staged(root, tmp_path / "src", "B")
    commit(store, b)
    assert store.committed() == b and store.history() == [a, b]
    return store, a, b


def startable(root: Path) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-B", "-m", "sdk", "store", "--root", str(root), "startable"]
    return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=120)


def refuse_if_damaged(store: ReleaseStore) -> None:
    """What a commit of `service.if_damaged: refuse` records: a damaged committed release starts nothing."""
    state = json.loads((store.root / STATE_FILE).read_text())
    (store.root / STATE_FILE).write_text(json.dumps({**state, "if_damaged": "refuse"}))


def edit_same_length(path: Path) -> None:
    """One byte changed in place: the length, the name, the folder all as they were."""
    data = path.read_bytes()
    changed = data.replace(b"release", b"RELEASE", 1)
    assert changed != data and len(changed) == len(data)
    path.chmod(0o644)
    with path.open("r+b") as handle:
        handle.write(changed)


def error_lines(done: subprocess.CompletedProcess) -> list[str]:
    assert "Traceback" not in done.stderr, done.stderr
    return [line for line in done.stderr.splitlines() if line.startswith("error:")]


def test_a_same_length_edit_of_a_committed_file_is_refused_at_the_start(two_committed):
    store, a, b = two_committed
    edit_same_length(store.release_dir(b) / "pipeline" / "p.yaml")
    why = f"release {b}: pipeline/p.yaml does not match its manifest (changed on disk)"
    done = startable(store.root)  # the default (service.if_damaged: previous): the release committed before starts
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["release"] == a and answer["committed"] == b
    assert answer["notes"] == [f"the committed release {b} failed its check ({why}); started {a}, committed before it"]
    refuse_if_damaged(store)
    done = startable(store.root)
    assert done.returncode == 1 and done.stdout == ""
    assert error_lines(done) == [f"error: nothing verified can start: {why} (if_damaged: refuse)"]


def test_a_same_length_edit_is_refused_by_the_runtimes_own_check(two_committed):
    store, _, b = two_committed
    allowed_to_run(store.release_dir(b))  # as committed: it may run
    edit_same_length(store.release_dir(b) / "pipeline" / "p.yaml")
    with pytest.raises(ReleaseError) as raised:
        allowed_to_run(store.release_dir(b))
    assert raised.value.message == f"release {b}: pipeline/p.yaml does not match its manifest (changed on disk)"


def test_a_same_length_edit_after_an_earlier_start_is_still_refused(two_committed):
    """The start before the edit checked every byte; the edit comes after it and is found all the same."""
    store, a, b = two_committed
    assert json.loads(startable(store.root).stdout)["release"] == b
    path = store.release_dir(b) / "sdk" / "extra.py"
    data = path.read_bytes()
    stat = path.stat()
    path.chmod(0o644)
    with path.open("r+b") as handle:
        handle.write(data.replace(b"B", b"X", 1))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # the modification time put back, as a careful editor would
    refuse_if_damaged(store)
    done = startable(store.root)
    assert done.returncode == 1
    why = f"release {b}: sdk/extra.py does not match its manifest (changed on disk)"
    assert error_lines(done) == [f"error: nothing verified can start: {why} (if_damaged: refuse)"]


@pytest.mark.parametrize("planted", ["sdk/sitecustomize.py", "pipeline/extra.yaml", "artifacts/model.onnx.bak"])
def test_a_file_planted_into_a_listed_folder_is_refused_at_the_start(two_committed, planted):
    store, a, b = two_committed
    path = store.release_dir(b) / planted
    path.parent.chmod(0o755)
    path.write_text("import os  # not what was checked\n")
    why = f"release {b}: {planted} is not part of the release (its manifest does not list it)"
    done = startable(store.root)
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["release"] == a and answer["notes"] == [f"the committed release {b} failed its check ({why}); started {a}, committed before it"]
    refuse_if_damaged(store)
    done = startable(store.root)
    assert done.returncode == 1 and error_lines(done) == [f"error: nothing verified can start: {why} (if_damaged: refuse)"]
    with pytest.raises(ReleaseError) as raised:
        allowed_to_run(store.release_dir(b))
    assert raised.value.message == why


def test_a_file_planted_at_the_top_of_the_release_is_refused(two_committed):
    store, _, b = two_committed
    (store.release_dir(b) / "sitecustomize.py").write_text("import os\n")
    with pytest.raises(ReleaseError) as raised:
        allowed_to_run(store.release_dir(b))
    assert raised.value.message == f"release {b}: sitecustomize.py is not part of the release (its manifest does not list it)"


# -- Pointers: only this store's own links name a release -------------------------------------------------------------
def outside_copy(store: ReleaseStore, release: str, where: Path) -> Path:
    """A copy of `release` somewhere else, one of its files changed: what a link planted by a writer of the root
    would lead to."""
    copy = where / release
    subprocess.run(["cp", "-r", str(store.release_dir(release)), str(copy)], check=True)
    (copy / "pipeline" / "p.yaml").chmod(0o644)
    (copy / "pipeline" / "p.yaml").write_text("version: 1\n# not what was checked\n")
    return copy


@pytest.mark.parametrize("form", ["absolute", "relative", "beside", "through"])
def test_a_pointer_leading_outside_the_store_is_no_release_of_it_and_is_put_back(two_committed, tmp_path, form):
    """`current` and `committed` replaced by links whose last part is the committed release's id, but that lead
    elsewhere: neither names a release of this store, both are reported, and the next start points them back at
    `releases/<id>`."""
    store, a, b = two_committed
    elsewhere = tmp_path / "elsewhere" / "releases"
    elsewhere.mkdir(parents=True)
    copy = outside_copy(store, b, elsewhere)
    if form == "beside":  # `<root>/<id>`: inside the root, but not in its releases
        subprocess.run(["cp", "-r", str(copy), str(store.root / b)], check=True)
    target = {
        "absolute": str(copy),
        "relative": f"../elsewhere/releases/{b}",
        "beside": b,
        "through": f"releases/{b}/../../../elsewhere/releases/{b}",
    }[form]
    for name in ("current", "committed"):
        (store.root / name).unlink()
        os.symlink(target, store.root / name)
        assert (store.root / name / "pipeline" / "p.yaml").read_text().endswith("# not what was checked\n")  # it leads there
    assert store.current() is None
    damaged = store.status()["damaged"]
    for name in ("current", "committed"):
        assert store.link_damage(name) == f"`{name}` is a link to {target!r}, not to a release of this store"
        assert store.link_damage(name) in damaged
    done = startable(store.root)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["release"] == b
    for name in ("current", "committed"):
        assert os.readlink(store.root / name) == f"releases/{b}"
    assert store.current() == b and store.status()["damaged"] == []


# -- The runtime's own check: a trial's release runs only while its trial may still finish --------------------------
def test_the_release_of_a_trial_that_can_no_longer_finish_may_not_run(two_committed, tmp_path):
    store, a, b = two_committed
    c = staged(store.root, tmp_path / "src", "C")
    with store.locked():
        store.begin_trial(c, token=None, owner="mender", deadline_s=600)  # a Mender trial: live until its deadline
    allowed_to_run(store.release_dir(c))
    trial = json.loads((store.root / "trial.json").read_text())
    (store.root / "trial.json").write_text(json.dumps({**trial, "boot": "an-earlier-boot"}))  # a power cut during it
    with pytest.raises(ReleaseError) as raised:
        allowed_to_run(store.release_dir(c))
    assert raised.value.message == (
        f"release {c} is neither committed nor on a live trial in the store at {store.root.resolve()}: it never passed its health check here"
    )
