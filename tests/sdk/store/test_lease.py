"""Fencing: a deploy whose lease lapsed changes nothing; the one that took over keeps its trial.

Real lock holders (`python -m sdk store hold-lock`) in their own processes, as on a device.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sdk.store.lease import FencingError
from sdk.store.objects import ReleaseStore
from tools.connect.sessions import LocalSession
from tools.release.bundle import Bundle
from tools.release.stage import manifest_for, stage_release
from tools.targets import LocalTarget

REPO = Path(__file__).resolve().parents[3]


def staged(root: Path, folder: Path, label: str) -> str:
    folder.mkdir(exist_ok=True)
    files = {}
    for name, data in {"pipeline/p.yaml": f"# {label}\n".encode(), "artifacts/model.onnx": b"M" * 1000}.items():
        path = folder / f"{label}-{name.replace('/', '_')}"
        path.write_bytes(data)
        files[name] = path
    bundle = Bundle(files, "pipeline/p.yaml", "artifacts", {})
    return stage_release(LocalSession(LocalTarget("local", root)), bundle, manifest_for(bundle)).release_id


def hold(root: Path, owner: str, lease: float) -> tuple[subprocess.Popen, int]:
    argv = [sys.executable, "-B", "-m", "sdk", "store", "--root", str(root), "hold-lock", owner, "--lease", str(lease), "--wait", "30"]
    process = subprocess.Popen(argv, cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    answer = json.loads(process.stdout.readline())
    assert answer["locked"] == owner
    return process, answer["token"]


def store_cli(root: Path, *args: str) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-B", "-m", "sdk", "store", "--root", str(root), *args]
    return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=60)


def test_a_deploy_whose_lease_lapsed_changes_nothing_and_the_new_holders_trial_survives(tmp_path):
    root = tmp_path / "target"
    store = ReleaseStore(root)
    first, a_release, b_release = (staged(root, tmp_path / "src", label) for label in ("first", "a", "b"))
    holder, token = hold(root, "bootstrap", 60)
    with store.locked():
        store.begin_trial(first, token=token, owner="bootstrap", deadline_s=60)
        store.mark_passed(token=token, health={"healthy": True}, commit_within_s=60)
        store.commit(token=token)
    holder.stdin.close()
    holder.wait(timeout=30)

    host_a, token_a = hold(root, "host-a", 1.5)
    with store.locked():
        store.begin_trial(a_release, token=token_a, owner="host-a", deadline_s=600)
        store.mark_passed(token=token_a, health={"healthy": True}, commit_within_s=600)
    # Host A goes silent (suspended, link lost) with its trial passed and not committed: after one
    # lease its holder rolls the trial back and frees the lock. Nothing is sent on its stdin.
    assert host_a.wait(timeout=30) == 0
    assert store.trial() is None and store.current() == store.committed() == first
    assert "ended without committing" in store.status()["last_trial"]["reason"]

    host_b, token_b = hold(root, "host-b", 60)
    assert token_b > token_a  # fencing tokens only grow
    with store.locked():
        store.begin_trial(b_release, token=token_b, owner="host-b", deadline_s=600)
    # Host A wakes up and carries on with its deploy: every mutating step is refused, nothing changes.
    for op in (["commit"], ["prune", "--keep", "1"], ["rollback"]):
        refused = store_cli(root, *op, "--token", str(token_a))
        assert refused.returncode == 1 and refused.stderr.count("error:") == 1, refused.stderr
        assert f"lease on the target (token {token_a}) has expired and host-b (token {token_b}) holds it now; nothing was changed" in refused.stderr
    with pytest.raises(FencingError), store.locked():
        store.commit(token=token_a)
    assert store.trial()["release"] == b_release and store.trial()["token"] == token_b and store.current() == b_release
    assert store.committed() == first and sorted(p.name for p in store.releases.iterdir()) == sorted([first, a_release, b_release])
    with store.locked():
        store.mark_passed(token=token_b, health={"healthy": True}, commit_within_s=60)
        store.commit(token=token_b)
    assert store.committed() == store.current() == b_release
    host_b.stdin.close()
    assert host_b.wait(timeout=30) == 0
    assert store.committed() == b_release  # a committed release stays when its deployer leaves


def test_a_dead_holders_lock_is_free_and_its_trial_is_rolled_back_at_the_next_entry_point(tmp_path):
    root = tmp_path / "target"
    store = ReleaseStore(root)
    first, second = (staged(root, tmp_path / "src", label) for label in ("first", "second"))
    with store.locked():
        store.begin_trial(first, token=None, owner="t", deadline_s=60)
        store.mark_passed(token=None, health={}, commit_within_s=60)
        store.commit(token=None)
    holder, token = hold(root, "host-a", 60)
    with store.locked():
        store.begin_trial(second, token=token, owner="host-a", deadline_s=600)
    holder.kill()  # SIGKILL: no chance to roll back (a power cut of the holder alone)
    holder.wait()
    started = time.monotonic()
    host_b, token_b = hold(root, "host-b", 60)  # the kernel freed the lock with the process
    # Freed at once: host-b's holder took it as soon as its Python started (a few seconds under load), where a lock
    # still held would have made it wait out the 60 s lease.
    assert time.monotonic() - started < 30 and token_b == token + 1
    with store.locked():
        assert store.recover() == second  # its deployer is gone: rolled back before anything else
    assert store.current() == store.committed() == first
    host_b.stdin.close()
    assert host_b.wait(timeout=30) == 0


def test_a_holder_reads_its_own_start_time_as_every_other_process_does():
    """The lease compares the start time its holder recorded with what a later process reads; the kernel's own
    value, as `cat` (another process) sees it, is what both must read (qemu-user fakes a process's own /proc/<pid>/stat)."""
    import os

    from sdk.store.lease import process_start

    seen = subprocess.run(["cat", f"/proc/{os.getpid()}/stat"], capture_output=True, text=True, check=True).stdout
    assert process_start(os.getpid()) == seen.rsplit(")", 1)[1].split()[19]


def test_a_zombie_lease_holder_is_dead_at_once_not_when_its_lease_lapses(tmp_path):
    """A holder that exited but was not reaped yet (a zombie) holds nothing: its lease is not live, though it was
    renewed a moment ago and `lease_s` is an hour."""
    from sdk.store.lease import read_lease

    script = "import os, sys; from sdk.store.lease import acquire; acquire(sys.argv[1], 'zombie', lease_s=3600); print('held', flush=1); os._exit(0)"
    child = subprocess.Popen([sys.executable, "-c", script, str(tmp_path)], stdout=subprocess.PIPE, text=True, cwd=REPO)
    try:
        assert child.stdout.readline().strip() == "held"
        deadline = time.monotonic() + 10
        while Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z" and time.monotonic() < deadline:
            time.sleep(0.01)  # exited, not reaped: a zombie
        lease = read_lease(tmp_path)
        assert lease is not None and lease.pid == child.pid and lease.live() is False
    finally:
        child.wait()


@pytest.mark.parametrize("damage", ["garbage", "negative", "directory"])
def test_a_damaged_token_file_never_lets_the_fencing_token_go_back(tmp_path, damage):
    from sdk.store.lease import TOKEN_FILE, acquire

    first = acquire(tmp_path, "first")
    first.end()
    token_file = tmp_path / TOKEN_FILE
    token_file.unlink()
    if damage == "directory":
        token_file.mkdir()
    else:
        token_file.write_text("\x00\x13garbage" if damage == "garbage" else "-5")
    (tmp_path / "lease.json").unlink()  # the last holder's record gone too: nothing remembers token 1
    if damage == "directory":
        with pytest.raises(OSError):  # the token cannot be recorded: no lease is issued on a token that may repeat
            acquire(tmp_path, "second")
        return
    second = acquire(tmp_path, "second")
    try:
        assert second.token > first.token and second.token >= int(time.time()) - 5  # above any token this store issued
    finally:
        second.end()
    third = acquire(tmp_path, "third")
    assert third.token == second.token + 1
    third.end()


@pytest.mark.parametrize("after", ["ended", "taken over"])
def test_a_passed_trial_is_not_committed_once_its_lease_is_gone_though_it_is_still_its_own(tmp_path, after):
    """The fence alone: the trial on the target is this deploy's own (its token, passed), so only the lease check
    stands between a deploy that lost its lease and a commit. Refused, nothing changed; the trial is rolled back by
    the next recovery, not committed."""
    from sdk.store.lease import acquire

    root = tmp_path / "target"
    store = ReleaseStore(root)
    first, second = (staged(root, tmp_path / "src", label) for label in ("first", "second"))
    with store.locked():
        store.begin_trial(first, token=None, owner="t", deadline_s=60)
        store.mark_passed(token=None, health={}, commit_within_s=60)
        store.commit(token=None)
    holder = acquire(root, "host-a", lease_s=600)
    token = holder.token
    with store.locked():
        store.begin_trial(second, token=token, owner="host-a", deadline_s=600)
        store.mark_passed(token=token, health={"healthy": True}, commit_within_s=600)
    holder.end()  # the lease is over (its deploy stopped heartbeating, or ended it), the trial record left as it was
    now = "nobody holds the target now"
    other = None
    if after == "taken over":
        other = acquire(root, "host-b", lease_s=600)
        now = f"host-b (token {other.token}) holds it now"
    try:
        before = {name: (root / name).read_bytes() for name in ("state.json", "trial.json")}
        with pytest.raises(FencingError) as refused, store.locked():
            store.commit(token=token)
        assert refused.value.message == f"this deploy's lease on the target (token {token}) has expired and {now}; nothing was changed"
        assert {name: (root / name).read_bytes() for name in before} == before
        assert store.committed() == first and store.trial()["release"] == second and store.trial()["token"] == token
        with store.locked():
            assert store.recover() == second  # its deployer's lease ended: rolled back, never committed
        assert store.committed() == store.current() == first
    finally:
        if other is not None:
            other.end()


def test_a_lease_not_renewed_within_its_lease_s_is_over_for_the_fence_and_the_next_deploy(tmp_path):
    """The lease's own clock: renewed within `lease_s`, the holder is fenced in; renewed longer ago than that (a host
    gone silent whose process still lives), its token no longer changes anything and the next deploy takes over with
    a higher one. The renewal time is set, not waited for: 10 s either side of a 30 s lease."""
    from sdk.store.lease import LEASE_FILE, acquire, check_token, read_lease

    root = tmp_path / "target"
    holder = acquire(root, "host-a", lease_s=30)
    try:
        record = json.loads((root / LEASE_FILE).read_text())
        (root / LEASE_FILE).write_text(json.dumps({**record, "renewed": time.monotonic() - 20}))
        check_token(root, holder.token)  # renewed 20 s ago: live
        assert read_lease(root).live()
        (root / LEASE_FILE).write_text(json.dumps({**record, "renewed": time.monotonic() - 40}))
        assert not read_lease(root).live()
        with pytest.raises(FencingError) as refused:
            check_token(root, holder.token)
        expired = f"this deploy's lease on the target (token {holder.token}) has expired and nobody holds the target now; nothing was changed"
        assert refused.value.message == expired
    finally:
        holder.end()
    other = acquire(root, "host-b", lease_s=30)
    try:
        assert other.token == holder.token + 1
        check_token(root, other.token)
    finally:
        other.end()


def test_a_lost_token_file_continues_from_the_last_holders_record(tmp_path):
    """The token file gone (restored from an old backup, or deleted) but the last holder's lease record kept: the
    next token is above the record's, never a token already handed out."""
    from sdk.store.lease import TOKEN_FILE, acquire

    for owner in ("first", "second", "third"):
        acquire(tmp_path, owner).end()
    (tmp_path / TOKEN_FILE).unlink()
    fourth = acquire(tmp_path, "fourth")
    try:
        assert fourth.token == 4
    finally:
        fourth.end()
    (tmp_path / TOKEN_FILE).write_text("2")  # an older value than the record's
    fifth = acquire(tmp_path, "fifth")
    assert fifth.token == 5
    fifth.end()
