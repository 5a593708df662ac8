"""The root step of the service, as the review tried it: real local users (the deploy login owns the store and its
agent copy), root's own copy of the SDK (`sdk export --root-tool`), and never the machine's real /etc (the
non-dry steps run in a private mount namespace over a copy of /etc; systemd itself cannot run here, so a
`systemctl` that records its arguments stands in for it)."""

from __future__ import annotations

import grp
import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.real_users import LOGIN, chown_tree, open_folder, real_user
from tests.sdk.service.service_helpers import copy_store

MARKER_CODE = "\nimport os as _os\nopen(_os.environ['SDK_TEST_MARKER'], 'w').write(str(_os.geteuid()))\n"


@pytest.fixture()
def login():
    return real_user(LOGIN)


@pytest.fixture()
def root_tool(tmp_path_factory) -> Path:
    """Root's copy of the SDK, written by the host command, in a folder of root's."""
    import pydantic

    from sdk.rootsafe import why_not_root_owned
    from tools.deploy.export import write_root_tool

    why = why_not_root_owned(Path(pydantic.__file__).parent.parent)
    if why is not None:  # root's copy imports nothing from a folder others may change: here its schema would be missing
        pytest.skip(f"this interpreter's site packages are not root's all the way up ({why}); install them as root")
    folder = tmp_path_factory.mktemp("root-tool")
    tool, _ = write_root_tool(folder, python=sys.executable)
    return tool


def _login_store(deployed_service, base: Path, login, *edits) -> Path:
    store = copy_store(deployed_service, base / "store", *edits)
    shutil.rmtree(store.root / "service", ignore_errors=True)  # a fresh store: no service has started yet
    agent = store.root / "agent"
    shutil.copytree(REPO / "sdk", agent / "sdk", ignore=shutil.ignore_patterns("__pycache__"))
    (agent / "sdk" / "__init__.py").write_text((agent / "sdk" / "__init__.py").read_text() + MARKER_CODE)  # the login's three lines
    chown_tree(store.root, login)
    return store.root


def _as_root(argv: list[str], *, env: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=180)


def _namespace(base: Path) -> tuple[Path, Path, dict]:
    """(a copy of /etc, systemctl's log, the environment) for a step run by `_in_namespace`."""
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare (util-linux) for a private mount namespace")
    etc = base / "etc"
    subprocess.run(["cp", "-a", "/etc", str(etc)], check=True, timeout=120)
    (etc / "systemd" / "system").mkdir(parents=True, exist_ok=True)
    stub = base / "bin"
    stub.mkdir()
    log = base / "systemctl.log"
    (stub / "systemctl").write_text(f'#!/bin/sh\necho "$*" >> {log}\n')
    (stub / "systemctl").chmod(0o755)
    return etc, log, {**os.environ, "PATH": f"{stub}:{os.environ['PATH']}"}


def _in_namespace(etc: Path, argv: list[str], env: dict) -> subprocess.CompletedProcess:
    script = 'mount --bind "$0" /etc && exec "$@"'
    done = _as_root(["unshare", "--mount", "--propagation", "private", "sh", "-c", script, str(etc), *argv], env=env)
    if "unshare failed" in done.stderr or "mount: " in done.stderr[:200]:
        pytest.skip(f"cannot make a private mount namespace here: {done.stderr.strip()[:200]}")
    return done


def test_roots_steps_never_run_the_logins_code(deployed_service, root_tool, login, tmp_path):
    """The login appended three lines to its agent's sdk/__init__.py. Root's steps (the service install, the trust
    policy) run from root's own copy with the login's folder as PYTHONPATH and working folder: the lines never run."""
    with open_folder() as base:
        root = _login_store(deployed_service, base, login)
        marker = tmp_path / "marker"
        env = {**os.environ, "PYTHONPATH": str(root / "agent"), "SDK_TEST_MARKER": str(marker), "SDK_TRUST_ROOT": str(tmp_path / "trust")}
        done = _as_root([str(root_tool), "service", "--root", str(root), "install", "--dry-run"], env=env, cwd=root / "agent")
        assert done.returncode == 0, done.stderr
        result = json.loads(done.stdout)
        assert f'PYTHONPATH={root_tool}' in result["text"] and result["ran"] is False
        key = subprocess.run(["openssl", "genpkey", "-algorithm", "ed25519"], capture_output=True, text=True, check=True).stdout
        public = subprocess.run(["openssl", "pkey", "-pubout"], input=key, capture_output=True, text=True, check=True).stdout
        request = tmp_path / "request.json"
        policy = {"keys": [{"name": "fleet", "public_key": public}], "device_type": "jetson-agx-orin", "target": "orin-01"}
        request.write_text(json.dumps({"action": "install-policy", "policy": policy}))
        done = _as_root([str(root_tool), "store", "--root", str(root), "trust", str(request)], env=env, cwd=root / "agent")
        assert done.returncode == 0, done.stderr
        assert (tmp_path / "trust" / "policy.json").stat().st_uid == 0
        assert not marker.exists()  # neither step imported the login's copy
        done = _as_root([sys.executable, "-m", "sdk", "service", "--root", str(root), "install", "--dry-run"], env=env, cwd=tmp_path)
        assert marker.read_text() == "0"  # the old way: root ran the login's lines (why the step moved to root's copy)


def test_a_service_link_to_a_decoy_is_refused_and_the_decoy_untouched(deployed_service, root_tool, login, tmp_path):
    with open_folder() as base:
        root = _login_store(deployed_service, base, login)
        decoy = base / "decoy"  # stands in for /etc
        decoy.mkdir(mode=0o755)
        (decoy / "passwd").write_text("root:x:0:0::/root:/bin/sh\n")
        (decoy / "passwd").chmod(0o644)
        os.symlink(decoy, root / "service")
        os.lchown(root / "service", login.pw_uid, login.pw_gid)
        before = {p: (os.lstat(p).st_mode, os.lstat(p).st_gid) for p in (decoy, decoy / "passwd")}
        env = {**os.environ, "SDK_TEST_MARKER": str(tmp_path / "marker")}
        done = _as_root([str(root_tool), "service", "--root", str(root), "install", "--dry-run"], env=env)
        assert done.returncode == 1 and "error: service is a link or not a folder: refused" in done.stderr, done.stderr
        etc, log, env = _namespace(base)
        done = _in_namespace(etc, [str(root_tool), "service", "--root", str(root), "install"], {**env, "SDK_TEST_MARKER": str(tmp_path / "m")})
        assert done.returncode == 1 and "service is a link or not a folder: refused" in done.stderr, done.stderr
        assert {p: (os.lstat(p).st_mode, os.lstat(p).st_gid) for p in before} == before
        assert not log.exists() and not list((etc / "systemd" / "system").glob("perception-*"))


def test_the_root_step_on_a_fresh_store_makes_the_shared_folder_and_installs_roots_rendering(deployed_service, root_tool, login, tmp_path):
    """A store no service has started in (no `<root>/service` yet): the step makes the folder (the login's, the store's
    group, 2770), creates the service user (in the copy of /etc) and installs root's rendering of the unit, whatever
    the login rendered in units/ (Group=shadow planted there)."""
    with open_folder() as base:
        root = _login_store(deployed_service, base, login)
        units = root / "units"
        units.mkdir(exist_ok=True)
        (units / "perception-tiny.service").write_text("[Service]\nUser=perception\nGroup=shadow\nExecStart=/tmp/x\n")
        etc, log, env = _namespace(base)
        done = _in_namespace(etc, [str(root_tool), "service", "--root", str(root), "install"], {**env, "SDK_TEST_MARKER": str(tmp_path / "m")})
        assert done.returncode == 0, done.stderr
        result = json.loads(done.stdout)
        assert result["ran"] and "differs from root's rendering" in result["note"] and result["shared"]["created"]
        assert result["root_floor"].startswith("no root policy on this device")  # the copy of /etc has none: said, not silent
        assert result["root_copy"]["same_as_release"] is True and result["root_copy"]["tool"] == str(root_tool)  # checked by sha256
        folder = os.lstat(root / "service")
        assert (folder.st_uid, folder.st_gid, stat.S_IMODE(folder.st_mode)) == (login.pw_uid, login.pw_gid, 0o2770)
        unit = (etc / "systemd" / "system" / "perception-tiny.service").read_text()
        group = grp.getgrgid(login.pw_gid).gr_name
        assert "User=perception" in unit and f"Group={group}" in unit and "shadow" not in unit and f"PYTHONPATH={root_tool}" in unit
        calls = [line for line in log.read_text().splitlines() if line != "--version"]  # the version: what the unit may use
        assert calls == ["daemon-reload", "enable perception-tiny.service", "restart perception-tiny.service"]
        assert "perception:" in (etc / "passwd").read_text()  # made in the copy, never in the machine's /etc
        if shutil.which("systemd-analyze"):
            from tests.sdk.service.test_unit import exposure

            installed = tmp_path / "perception-tiny.service"
            installed.write_text(unit)
            assert exposure(installed) <= 0.7  # root's rendering is as locked down as the deploy's
        assert not (tmp_path / "m").exists()


AUDIT = """
import json, os, runpy, sys
log = open(os.environ['SDK_TEST_AUDIT'], 'w')
watched = ('open', 'os.chmod', 'os.chown', 'os.rename', 'os.replace', 'os.mkdir', 'os.remove', 'os.rmdir', 'os.symlink', 'os.link')
def hook(event, args):
    if event == 'open' and args and args[0] in sys.path:
        return  # the import system probing a sys.path entry (an editable install's path hook is a relative name)
    if event in watched:
        log.write(json.dumps([event, [a if isinstance(a, (int, str)) or a is None else str(a) for a in args]]) + '\\n')
        log.flush()
sys.addaudithook(hook)
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name='__main__')
"""


def test_every_path_the_root_step_opens_in_the_store_is_opened_without_following_a_link(deployed_service, root_tool, login, tmp_path):
    """Python's audit hook lists every open, chmod, chown, rename and mkdir of the whole step (the non-dry install):
    under the store, whatever is opened to be written or created carries O_NOFOLLOW, nothing is changed by a path
    (only through a descriptor: fchmod, fchown), and the one rename there is none."""
    with open_folder() as base:
        root = _login_store(deployed_service, base, login)
        (root / "service").mkdir()
        (root / "service" / "status.json").write_text("{}")
        chown_tree(root / "service", login)
        etc, _, env = _namespace(base)
        audit = tmp_path / "audit.jsonl"
        env = {**env, "SDK_TEST_AUDIT": str(audit), "SDK_TEST_MARKER": str(tmp_path / "m")}
        done = _in_namespace(etc, [sys.executable, "-I", "-c", AUDIT, str(root_tool), "service", "--root", str(root), "install"], env)
        assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in audit.read_text().splitlines()]
    store = str(root)
    written = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
    opens = [(args[0], args[2]) for event, args in events if event == "open" and isinstance(args[0], str) and isinstance(args[2], int)]
    assert any(path == store for path, _ in opens) and any(path == "service" for path, _ in opens)  # the store, then relative to it
    for path, flags in opens:
        inside = path.startswith(store + "/") or path == store or not path.startswith("/")
        if inside and flags & written:
            assert flags & os.O_NOFOLLOW, f"{path} opened for writing without O_NOFOLLOW"
        if inside and not path.startswith("/"):
            assert flags & os.O_NOFOLLOW, f"{path} (relative to a descriptor) opened without O_NOFOLLOW"
    for event, args in events:
        if event in ("os.chmod", "os.chown"):
            assert isinstance(args[0], int), f"{event} by path: {args[0]}"
        if event in ("os.rename", "os.replace", "os.remove", "os.symlink", "os.link") and isinstance(args[0], str):
            assert not args[0].startswith(store), f"{event} in the store: {args}"
    assert sum(1 for event, args in events if event == "os.chown" and isinstance(args[0], int)) >= 2  # the folder and status.json


def test_roots_trial_runs_a_store_the_login_owns_as_the_login(deployed_service, login, tmp_path):
    """The Mender module (root) tries a release in a store shared with SSH deploys: the login planted
    envs/<release>/bin/python. It runs, as the login, never as root; the trial fails its health check and rolls back."""
    from sdk.store.activation import MENDER_OWNER, STATE_FILE
    from sdk.store.trial import HealthPolicy, run_trial
    from tests.sdk.service.service_helpers import commit_edited

    with open_folder() as base:
        store = copy_store(deployed_service, base / "store")
        before = store.committed()
        release = commit_edited(store, [("status_interval_s: 0.2\n", "status_interval_s: 0.25\n")])  # a second release
        store._write_json(STATE_FILE, {"committed": before, "history": [before]})  # assembled, not committed: a new release
        seen = base / "seen"
        seen.mkdir()
        planted = store.env_dir(release) / "bin" / "python"
        shutil.rmtree(store.env_dir(release), ignore_errors=True)
        planted.parent.mkdir(parents=True)
        planted.write_text(f"#!/bin/sh\nid -u > {seen}/uid\nexit 3\n")
        planted.chmod(0o755)
        chown_tree(store.root, login)
        chown_tree(seen, login)
        outcome = run_trial(store, release, token=None, owner=MENDER_OWNER, target="mender", policy=HealthPolicy(min_frames=1, timeout_s=60))
        assert (seen / "uid").read_text().strip() == str(login.pw_uid)  # the login's file ran as the login
        assert outcome["healthy"] is False and store.committed() == before and store.trial() is None
