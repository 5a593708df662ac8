"""sdk/rootsafe.py with real local users: what counts as root's all the way up, what root refuses to import, and how
root shares a folder another user controls (through descriptors, never following what that user planted)."""

from __future__ import annotations

import grp
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from sdk.rootsafe import RootPathError, share_folder, why_not_root_owned
from tests.conftest import REPO
from tests.real_users import LOGIN, SERVICE, chown_tree, open_folder, real_user, run_as


@pytest.fixture()
def login():
    return real_user(LOGIN)


@pytest.fixture()
def service_user():
    return real_user(SERVICE)


def test_root_owned_all_the_way_up_and_every_way_it_is_not(login):
    with open_folder() as base:
        mine = base / "root-only"
        mine.mkdir(mode=0o755)
        (mine / "tool").write_text("x")
        assert why_not_root_owned(mine / "tool") is None
        theirs = base / "login-folder"
        theirs.mkdir()
        os.chown(theirs, login.pw_uid, login.pw_gid)
        inside = theirs / "roots-file"
        inside.write_text("x")  # root's own file, but in a folder the login may rename or replace
        assert "belongs to uid" in why_not_root_owned(inside)
        link = mine / "link-into-theirs"
        os.symlink(theirs, link)  # root's link, leading into the login's folder
        assert "belongs to uid" in why_not_root_owned(link / "roots-file")
        shared = base / "group-writable"
        shared.mkdir()
        shared.chmod(0o775)
        assert "may be changed by users other than root" in why_not_root_owned(shared)
        assert "may be changed by users other than root" in why_not_root_owned("/tmp")  # a sticky folder is no place to import from
        assert why_not_root_owned(base) is None  # root's entry in the sticky /tmp: no one else may replace it


def test_root_refuses_an_sdk_another_user_controls_and_drops_their_paths(login, tmp_path):
    """`python -m sdk service install` as root with the deploy login's agent copy on PYTHONPATH (the old documented root
    step): refused before the step runs; root's own sdk runs, and a login folder on sys.path is dropped before anything
    imports from it."""
    with open_folder() as base:
        agent = base / "agent"
        agent.mkdir()
        shutil.copytree(REPO / "sdk", agent / "sdk", ignore=shutil.ignore_patterns("__pycache__"))
        chown_tree(agent, login)
        env = {**os.environ, "PYTHONPATH": str(agent), "PYTHONDONTWRITEBYTECODE": "1"}
        step = [sys.executable, "-m", "sdk", "service", "--root", str(tmp_path), "install", "--dry-run"]
        done = subprocess.run(step, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert done.returncode == 1, done.stdout
        assert done.stderr.startswith(f"error: refusing to run as root from {agent / 'sdk'}") and "belongs to uid" in done.stderr
        assert "hint: run root's steps with root's own copy of the SDK" in done.stderr and "Traceback" not in done.stderr
        script = (
            "import sys; sys.path.insert(1, sys.argv[1]); from sdk.rootsafe import confine_imports; dropped = confine_imports();"
            " print(dropped == [sys.argv[1]] and sys.argv[1] not in sys.path)"
        )
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        done = subprocess.run([sys.executable, "-c", script, str(agent)], env=env, capture_output=True, text=True, timeout=120)
        assert done.stdout.strip() == "True", done.stderr


def _plant(user, folder: Path, decoy: Path, fifo: bool = True) -> None:
    """As `user` (a real process): a link to the decoy, a FIFO, and a file of its own, in `folder`."""
    script = (
        "import os, sys; folder, decoy = sys.argv[1], sys.argv[2]\n"
        "os.symlink(decoy, os.path.join(folder, 'status.json'))\n"
        "os.symlink(os.path.dirname(decoy), os.path.join(folder, 'output'))\n"
        + ("os.mkfifo(os.path.join(folder, 'pipe'))\n" if fifo else "")
        + "open(os.path.join(folder, 'mine.jsonl'), 'w').write('x')\n"
    )
    done = run_as(user, ["/usr/bin/python3", "-c", script, str(folder), str(decoy)])
    assert done.returncode == 0, done.stderr


def test_sharing_a_folder_changes_only_the_owners_entries_through_descriptors(login, service_user):
    if not Path("/usr/bin/python3").exists():
        pytest.skip("needs the system Python (apt-get install python3)")
    with open_folder() as base:
        decoy_dir = base / "etc"
        decoy_dir.mkdir()
        decoy = decoy_dir / "passwd"
        decoy.write_text("root:x:0:0\n")
        decoy.chmod(0o644)
        store = base / "store"
        (store / "service").mkdir(parents=True)
        chown_tree(store, login)
        gid = grp.getgrnam(LOGIN).gr_gid
        (store / "service").chmod(0o2777)  # open for the planting below (the root step itself leaves 2770)
        _plant(service_user, store / "service", decoy)
        before = [(os.lstat(p).st_mode, os.lstat(p).st_gid) for p in (decoy, decoy_dir)]
        fd = os.open(store, os.O_RDONLY | os.O_DIRECTORY)
        try:
            done = share_folder(fd, "service", owner=login.pw_uid, gid=gid, allowed_owners={login.pw_uid, service_user.pw_uid})
        finally:
            os.close(fd)
        assert [(os.lstat(p).st_mode, os.lstat(p).st_gid) for p in (decoy, decoy_dir)] == before  # nothing followed
        left = " ".join(done.skipped)
        assert "service/status.json: a link or a special file" in left and "service/output" in left and "service/pipe" in left
        mine = os.lstat(store / "service" / "mine.jsonl")
        assert mine.st_gid == gid and mine.st_mode & 0o060 == 0o060 and not mine.st_mode & 0o007
        folder = os.lstat(store / "service")
        assert stat.S_IMODE(folder.st_mode) == 0o2770 and folder.st_gid == gid


def test_a_link_where_the_shared_folder_belongs_is_refused_and_a_missing_one_is_made(login):
    with open_folder() as base:
        decoy = base / "decoy"
        decoy.mkdir(mode=0o755)
        store = base / "store"
        store.mkdir()
        os.symlink(decoy, store / "service")
        chown_tree(store, login)
        fd = os.open(store, os.O_RDONLY | os.O_DIRECTORY)
        try:
            with pytest.raises(RootPathError, match="service is a link or not a folder: refused"):
                share_folder(fd, "service", owner=login.pw_uid, gid=login.pw_gid, allowed_owners={login.pw_uid})
            os.unlink(store / "service")
            done = share_folder(fd, "service", owner=login.pw_uid, gid=login.pw_gid, allowed_owners={login.pw_uid})
        finally:
            os.close(fd)
        assert stat.S_IMODE(decoy.stat().st_mode) == 0o755 and decoy.stat().st_uid == 0
        made = os.lstat(store / "service")
        assert done.created and stat.S_ISDIR(made.st_mode) and (made.st_uid, made.st_gid) == (login.pw_uid, login.pw_gid)
        assert stat.S_IMODE(made.st_mode) == 0o2770


def test_root_hands_a_store_it_does_not_own_to_its_owner(login, tmp_path):
    """`runs_as`: nothing to hand over in root's own store; the owner's ids for the login's store; a store of root's in
    a folder the login may change is refused. `as_user` runs the work in a child that is the owner, not root."""
    from sdk.rootsafe import as_user, runs_as

    with open_folder() as base:
        own = base / "roots-store"
        own.mkdir(mode=0o755)
        assert runs_as(own) is None
        theirs = base / "logins-store"
        theirs.mkdir()
        os.chown(theirs, login.pw_uid, login.pw_gid)
        assert runs_as(theirs) == (login.pw_uid, login.pw_gid)
        inside = theirs / "roots-store-in-theirs"
        inside.mkdir()
        with pytest.raises(RootPathError, match="root's store in a folder other users may change"):
            runs_as(inside)
        answer = theirs / "euid"
        os.chown(theirs, login.pw_uid, login.pw_gid)

        def work() -> None:
            answer.write_text(f"{os.geteuid()} {os.getegid()} {os.getgroups()}")

        assert as_user(runs_as(theirs), work) == 0
        assert answer.read_text() == f"{login.pw_uid} {login.pw_gid} []"
        assert as_user((login.pw_uid, login.pw_gid), lambda: (_ for _ in ()).throw(OSError("no"))) == 1  # a failure is an exit code
        assert os.geteuid() == 0  # the caller is still root
