"""The version floor (sdk/store/floors.py): a fallback never goes below it; with root's policy, a floor the deploy
login cannot lower (raised by root's own steps), tried with a real deploy login in a private mount namespace; and
`sdk status` says which floor holds."""

from __future__ import annotations

import hashlib
import json
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from sdk.errors import ReleaseError
from sdk.release import FileEntry, ReleaseManifest
from sdk.store.activation import STATE_FILE
from sdk.store.objects import ReleaseStore
from sdk.store.startable import resolve_startable
from sdk.store.trust_admin import administer
from tests.sdk.store.test_trust import DEVICE, FOR_DEVICE, commit, pem, release
from tools.release.signing import Binding, sign_manifest

REPO = Path(__file__).resolve().parents[3]
DRIVER = Path(__file__).with_name("floor_driver.py")
LOGIN = "sdk-test-deploy"  # the deploy login: a real local user, made by the fixture below when absent


@pytest.fixture()
def trusted(tmp_path):
    store = ReleaseStore(tmp_path / "root")
    store.ensure()
    key = Ed25519PrivateKey.generate()
    with store.locked():
        administer(store, {"action": "add", "public_key": pem(key), "name": "release-2026", **DEVICE})
    return store, key


def damage(store: ReleaseStore, release_id: str) -> None:
    """Its own pipeline file (the model is one object shared by every release here), the same length, other bytes."""
    path = store.release_dir(release_id) / "pipeline" / "p.yaml"
    os.chmod(path, 0o644)
    path.write_bytes(path.read_bytes().upper())


def test_a_fallback_never_goes_below_the_floor(trusted):
    store, key = trusted
    first, second = release(store, "first"), release(store, "second")
    commit(store, first, sign_manifest(first, key, FOR_DEVICE, version=100))
    commit(store, second, sign_manifest(second, key, FOR_DEVICE, version=200))
    assert store.state()["if_damaged"] == "previous"
    damage(store, second.release_id)
    below = "version 100 of pipeline 'p', below the store's floor, version 200: a fallback never goes below it"
    with pytest.raises(ReleaseError, match=below) as refused:
        resolve_startable(store, repair=False)
    assert "sdk rollback" in refused.value.hint  # an older release runs only when someone chooses it


def test_a_fallback_at_its_own_pipelines_floor_still_starts(trusted):
    """Floors are per pipeline: the previous committed release of another pipeline is at its own floor, and starts."""
    store, key = trusted
    other = release(store, "other", name="q")
    commit(store, other, sign_manifest(other, key, Binding("q", "jetson-agx-orin", ("orin-01",)), version=50))
    current = release(store, "current")
    commit(store, current, sign_manifest(current, key, FOR_DEVICE, version=100))
    damage(store, current.release_id)
    chosen = resolve_startable(store, repair=False)
    assert chosen.release == other.release_id and "failed its check" in " ".join(chosen.notes)


def test_status_says_the_floor_is_the_deploy_logins_without_roots_policy(trusted):
    store, key = trusted
    first = release(store, "first")
    commit(store, first, sign_manifest(first, key, FOR_DEVICE, version=100))
    floors = store.status()["floors"]
    assert floors["held_by"] == "store" and floors["pipelines"]["p"] == {"floor": 100, "store": 100, "root": None, "held_by": "store"}
    assert "the version floor is the deploy login's" in floors["note"]


# Root's floor, with a real deploy login ---------------------------------------------------------------------------
@pytest.fixture()
def login():
    if os.geteuid() != 0 or not all(shutil.which(t) for t in ("unshare", "setpriv", "useradd")) or not Path("/usr/bin/python3").exists():
        pytest.skip("needs root, unshare, setpriv, useradd and the system Python to run the deploy login as a real user")
    try:
        return pwd.getpwnam(LOGIN)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", LOGIN], check=True, timeout=60)
        return pwd.getpwnam(LOGIN)


def signed_release(work: Path, label: str, key, version: int) -> dict:
    files = {}
    for name, data in {"pipeline/p.yaml": f"version: 1\nname: p\n# {label}\n".encode(), "artifacts/model.onnx": label.encode() * 8}.items():
        source = work / "sources" / f"{label}-{Path(name).name}"
        source.write_bytes(data)
        files[name] = [str(source), hashlib.sha256(data).hexdigest(), len(data)]
    manifest = ReleaseManifest({n: FileEntry(s, z) for n, (_, s, z) in files.items()}, "pipeline/p.yaml", "artifacts", {})
    return {"files": files, "signature": sign_manifest(manifest, key, FOR_DEVICE, version=version)}


def run_steps(work: Path, login, steps: list[tuple[str, ...]]) -> list[dict]:
    """The steps in one private mount namespace: /etc is an overlay whose changes land in the test's folder (the
    machine's /etc is never written); ("root", ...) steps run as root, ("login", ...) as the deploy login."""
    overlay = work / "overlay"
    python = f"env -i PATH=/usr/bin:/bin PYTHONPATH={REPO} PYTHONDONTWRITEBYTECODE=1 /usr/bin/python3 {DRIVER} {work}"
    as_login = f"setpriv --reuid={login.pw_uid} --regid={login.pw_gid} --clear-groups"
    lines = [
        f"mount -t tmpfs none {overlay} && mkdir {overlay}/upper {overlay}/work",
        f"mount -t overlay overlay -o lowerdir=/etc,upperdir={overlay}/upper,workdir={overlay}/work /etc",
        "mkdir -p /etc/perception",
    ]
    lines += [f"{as_login + ' ' if who == 'login' else ''}{python} {' '.join(args)}" for who, *args in steps]
    namespace = ["unshare", "--mount", "--propagation", "private", "sh", "-ec", "\n".join(lines)]
    done = subprocess.run(namespace, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_with_roots_policy_a_lowered_store_floor_lets_no_older_release_in(login):
    """The review's case: root's policy on an SSH device; the deploy login sets state.json's floors to 0 and replays an
    older signed release. Before root's `raise-floors` step it gets in (the floor above root's is the login's, and
    `sdk status` says so); after it, install, `sdk rollback` and a hand-written rollback are all refused."""
    key = Ed25519PrivateKey.generate()
    work = Path(tempfile.mkdtemp(prefix="sdk-floors-", dir="/tmp"))
    try:
        os.chmod(work, 0o755)
        (work / "overlay").mkdir()
        (work / "sources").mkdir()
        releases = {label: signed_release(work, label, key, version) for label, version in (("first", 100), ("older", 150), ("second", 200))}
        (work / "releases.json").write_text(json.dumps(releases))
        policy = {"keys": [{"name": "fleet-2026", "public_key": pem(key)}], **DEVICE}
        (work / "policy.json").write_text(json.dumps(policy))
        (work / "root").mkdir()
        os.chown(work / "root", login.pw_uid, login.pw_gid)
        for path in (work / "sources").iterdir():
            path.chmod(0o644)
        common = [("root", "policy"), ("login", "commit", "first"), ("login", "commit", "second")]
        before = run_steps(work, login, [*common, ("login", "attack")])[-1]
        assert before["status_floors"]["held_by"] == "root" and before["status_floors"]["pipelines"]["p"]["held_by"] == "store"
        assert "above it the floor is the deploy login's" in before["status_floors"]["note"]
        assert before["install"] is None  # no root step yet: the login's own floor was all there was, and it lowered it

        shutil.rmtree(work / "root")
        (work / "root").mkdir()
        os.chown(work / "root", login.pw_uid, login.pw_gid)
        after = run_steps(work, login, [*common, ("root", "raise-floors"), ("login", "attack")])
        assert after[-2]["raised"] == {"pipeline": "p", "version": 200}
        attack = after[-1]
        assert attack["status_floors"]["pipelines"]["p"] == {"floor": 200, "store": 200, "root": 200, "held_by": "root"}
        assert "older than version 200 this device has committed: a downgrade is refused (root's floor" in attack["install"]
        assert "below root's floor (the device's trust policy), version 200" in attack["rollback"]
        assert "not even by `sdk rollback`" in attack["start"]
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_the_raise_floors_step_needs_root_and_roots_policy(trusted):
    store, key = trusted
    with store.locked(), pytest.raises(ReleaseError, match="there is no root policy"):
        administer(store, {"action": "raise-floors"})
    state = json.loads((store.root / STATE_FILE).read_text())
    assert "floors" not in state or state["floors"] == {}


def test_the_status_summary_says_whose_floor_holds(trusted):
    import io

    from rich.console import Console

    from tools.console import render_status

    store, key = trusted
    first = release(store, "first")
    commit(store, first, sign_manifest(first, key, FOR_DEVICE, version=100))
    out = io.StringIO()
    render_status(Console(file=out, width=400), "orin-01", store.status())
    line = next(line for line in out.getvalue().splitlines() if "version floor" in line)
    assert "p v100 (the deploy login's); no root policy on this device: the version floor is the deploy login's" in line
