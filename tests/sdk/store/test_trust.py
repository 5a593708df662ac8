"""The device's trust policy (sdk/store/trust.py, sdk/store/trust_admin.py): no downgrades, signatures that stay required, keys
changed only by a key already trusted, revocation at the next start, releases bound to the device, and root's
policy that the deploy login cannot change."""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from sdk.errors import ReleaseError
from sdk.release import FileEntry, ReleaseManifest
from sdk.store.activation import STATE_FILE
from sdk.store.objects import ReleaseStore
from sdk.store.signing import key_fingerprint, public_key_pem
from sdk.store.startable import resolve_startable
from sdk.store.trust_admin import administer
from tools.release.signing import Binding, sign_legacy, sign_manifest

REPO = Path(__file__).resolve().parents[3]
DEVICE = {"device_type": "jetson-agx-orin", "target": "orin-01"}
FOR_DEVICE = Binding("p", "jetson-agx-orin", ("orin-01",))


def pem(key: Ed25519PrivateKey) -> str:
    return public_key_pem(key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw))


def fingerprint(key: Ed25519PrivateKey) -> str:
    return key_fingerprint(key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw))


def release(store: ReleaseStore, label: str, name: str = "p") -> ReleaseManifest:
    """A release of pipeline `name` whose objects are in the store (nothing assembled)."""
    import hashlib

    store.ensure()
    files = {}
    for path, data in {"pipeline/p.yaml": f"version: 1\nname: {name}\n# {label}\n".encode(), "artifacts/model.onnx": b"M" * 64}.items():
        sha = hashlib.sha256(data).hexdigest()
        source = store.root.parent / f"{label}-{sha[:8]}"
        source.write_bytes(data)
        store.add_file(source, sha)
        files[path] = FileEntry(sha, len(data))
    return ReleaseManifest(files, "pipeline/p.yaml", "artifacts", {"label": label})


def commit(store: ReleaseStore, manifest: ReleaseManifest, signature: str | None) -> None:
    """Assemble, the trial's check, then record a pass and commit (the health run itself is tested elsewhere)."""
    with store.locked():
        store.assemble(manifest, signature)
        store.verify_signature(manifest.release_id, stage="trial")
        store.begin_trial(manifest.release_id, token=None, owner="test", deadline_s=600)
        store.mark_passed(token=None, health={"healthy": True}, commit_within_s=600)
        store.commit(token=None)


SEQUENCE = itertools.count(1)  # a statement's sequence number: above the last one any store here applied


def statement(kind: str, key: str, signer: Ed25519PrivateKey, **extra) -> dict:
    """Bound to DEVICE, with the next sequence number, unless `extra` says otherwise."""
    import base64

    from sdk.store.trust import DOMAIN_TRUST, canonical

    bound = {**DEVICE, "sequence": next(SEQUENCE)}
    body = {"kind": kind, "key": key, "by": fingerprint(signer), "at": "2026-11-27T00:00:00Z", **bound, **extra}
    body = {k: v for k, v in body.items() if v is not None}  # extra's None: a field left out (an earlier SDK's statement)
    return {**body, "signature": base64.b64encode(signer.sign(DOMAIN_TRUST + canonical(body))).decode()}


@pytest.fixture()
def trusted(tmp_path):
    """A store trusting one key (its first: taken as given, with the device's identity)."""
    store = ReleaseStore(tmp_path / "root")
    store.ensure()
    key = Ed25519PrivateKey.generate()
    with store.locked():
        administer(store, {"action": "add", "public_key": pem(key), "name": "release-2026", **DEVICE})
    return store, key


def test_an_older_signed_release_is_refused_after_a_newer_one_is_committed(trusted):
    store, key = trusted
    newer, older = release(store, "newer"), release(store, "older")
    commit(store, newer, sign_manifest(newer, key, FOR_DEVICE, version=200))
    assert store.state()["floors"] == {"p": 200}
    downgrade = "version 100 of pipeline 'p', older than version 200 this device has committed"
    replayed = sign_manifest(older, key, FOR_DEVICE, version=100)  # properly signed, only older
    with pytest.raises(ReleaseError, match=downgrade):
        store.assemble(older, replayed)
    folder = store.releases / older.release_id  # assembled behind the check's back: the trial refuses it too
    folder.mkdir()
    (folder / "manifest.json").write_text(older.to_json())
    (folder / "manifest.json.sig").write_text(replayed)
    with pytest.raises(ReleaseError, match=downgrade):
        store.verify_signature(older.release_id, stage="trial")
    again = release(store, "newest")
    commit(store, again, sign_manifest(again, key, FOR_DEVICE, version=300))  # a newer version goes through
    assert store.state()["floors"] == {"p": 300}


def test_sdk_rollback_may_go_below_the_floor_and_only_it(trusted):
    store, key = trusted
    first, second = release(store, "first"), release(store, "second")
    commit(store, first, sign_manifest(first, key, FOR_DEVICE, version=100))
    commit(store, second, sign_manifest(second, key, FOR_DEVICE, version=200))
    with store.locked():
        assert store.rollback() == first.release_id
    assert store.state()["rolled_back"] == first.release_id
    assert resolve_startable(store).release == first.release_id  # chosen on purpose: it starts
    state = json.loads((store.root / STATE_FILE).read_text())
    del state["rolled_back"]  # the same store without the rollback's record: a downgrade, refused at the start
    (store.root / STATE_FILE).write_text(json.dumps(state))
    with pytest.raises(ReleaseError, match="nothing verified can start: .*a downgrade is refused"):
        resolve_startable(store, repair=False)


def test_deleting_the_trusted_key_does_not_make_unsigned_releases_acceptable(trusted):
    store, key = trusted
    first = release(store, "first")
    commit(store, first, sign_manifest(first, key, FOR_DEVICE, version=100))
    for path in (store.root / "trust" / "keys").glob("*.pub"):
        path.unlink()
    unsigned = release(store, "unsigned")
    with pytest.raises(ReleaseError, match="is not signed; this device accepts only releases signed by a key \\(none is trusted now\\)"):
        store.assemble(unsigned)
    with pytest.raises(ReleaseError, match="nothing verified can start"):  # and what it had committed no longer verifies either
        resolve_startable(store, repair=False)


def test_a_new_key_needs_the_trusted_keys_signature(trusted):
    store, key = trusted
    new, stranger = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    with store.locked():
        with pytest.raises(ReleaseError, match="the deploy login alone cannot replace it"):
            administer(store, {"action": "add", "public_key": pem(new)})
        forged = statement("add", fingerprint(new), stranger, public_key=pem(new), name="new")
        with pytest.raises(ReleaseError, match="not signed by a key this device trusts"):
            administer(store, {"action": "add", "public_key": pem(new), "statement": forged})
        rotation = statement("add", fingerprint(new), key, public_key=pem(new), name="release-2027")
        answer = administer(store, {"action": "add", "public_key": pem(new), "statement": rotation})
    assert answer["rotation"] and set(answer["keys"]) == {fingerprint(key), fingerprint(new)}  # both, for the rotation
    signed_by_new = release(store, "by-new")
    commit(store, signed_by_new, sign_manifest(signed_by_new, new, FOR_DEVICE, version=100))
    assert store.committed() == signed_by_new.release_id


def test_a_revoked_keys_committed_release_is_refused_at_the_next_start_and_only_a_rollback_goes_below_the_floor(trusted):
    store, key = trusted
    second_key = Ed25519PrivateKey.generate()
    with store.locked():
        rotation = statement("add", fingerprint(second_key), key, public_key=pem(second_key))
        administer(store, {"action": "add", "public_key": pem(second_key), "statement": rotation})
    first, second = release(store, "first"), release(store, "second")
    commit(store, first, sign_manifest(first, second_key, FOR_DEVICE, version=100))
    commit(store, second, sign_manifest(second, key, FOR_DEVICE, version=200))
    assert resolve_startable(store).release == second.release_id
    with store.locked():
        with pytest.raises(ReleaseError, match="not signed by a key this device trusts"):  # a key cannot revoke itself
            administer(store, {"action": "revoke", "statement": statement("revoke", fingerprint(key), key)})
        administer(store, {"action": "revoke", "statement": statement("revoke", fingerprint(key), second_key)})
    with pytest.raises(ReleaseError, match="which this device revoked; .*version 100 .*a fallback never goes below it") as refused:
        resolve_startable(store)  # the previous release is older than the floor: the device never chooses a downgrade itself
    assert "sdk rollback" in refused.value.hint
    with store.locked():
        assert store.rollback() == first.release_id  # chosen on purpose: below the store's floor, allowed
    assert resolve_startable(store).release == first.release_id
    with pytest.raises(ReleaseError, match="was revoked on this device"), store.locked():
        administer(store, {"action": "add", "public_key": pem(key), "statement": statement("add", fingerprint(key), second_key, public_key=pem(key))})


@pytest.mark.parametrize(
    ("binding", "refused"),
    [
        (Binding("p", "jetson-thor", ("orin-01",)), "signed for device type 'jetson-thor'; this device is 'jetson-agx-orin'"),
        (Binding("p", "jetson-agx-orin", ("orin-02",)), "signed for orin-02, not for this device (orin-01)"),
        (Binding("parking", "jetson-agx-orin", ("orin-01",)), "signed for pipeline 'parking', but it runs pipeline 'p'"),
    ],
)
def test_a_release_signed_for_another_device_target_or_pipeline_is_refused(trusted, binding, refused):
    store, key = trusted
    manifest = release(store, "elsewhere")
    with pytest.raises(ReleaseError, match=re.escape(refused)):
        store.assemble(manifest, sign_manifest(manifest, key, binding, version=100))


def test_an_earlier_sdks_signature_starts_what_was_committed_but_installs_nothing_new(trusted):
    store, key = trusted
    manifest = release(store, "legacy")
    with pytest.raises(ReleaseError, match="signed without a version or a device binding"):
        store.assemble(manifest, sign_legacy(manifest, key))
    commit(store, manifest, sign_manifest(manifest, key, FOR_DEVICE, version=100))
    (store.release_dir(manifest.release_id) / "manifest.json.sig").write_text(sign_legacy(manifest, key))  # as an earlier SDK left it
    assert resolve_startable(store).release == manifest.release_id


# Root's policy ---------------------------------------------------------------------------------------------------
@pytest.fixture()
def root_policy(tmp_path, monkeypatch):
    if os.geteuid() != 0:
        pytest.skip("root's policy is installed as root")
    folder = tmp_path / "etc-perception-trust"
    monkeypatch.setenv("SDK_TRUST_ROOT", str(folder))
    for path in (tmp_path, tmp_path.parent, tmp_path.parent.parent):
        if path.stat().st_mode & 0o022:
            pytest.skip(f"{path} is writable by others: no folder below it can hold root's policy")
    key = Ed25519PrivateKey.generate()
    store = ReleaseStore(tmp_path / "root")
    store.ensure()
    policy = {"keys": [{"name": "fleet-2026", "public_key": pem(key)}], "device_type": "jetson-agx-orin", "target": "orin-01"}
    with store.locked():
        assert administer(store, {"action": "install-policy", "policy": policy})["installed"] == str(folder / "policy.json")
    return store, key, folder


def test_roots_policy_decides_and_the_store_cannot_change_it(root_policy):
    store, key, folder = root_policy
    assert (folder / "policy.json").stat().st_mode & 0o777 == 0o644
    manifest = release(store, "fleet")
    commit(store, manifest, sign_manifest(manifest, key, FOR_DEVICE, version=100))
    other = Ed25519PrivateKey.generate()
    with store.locked(), pytest.raises(ReleaseError, match="cannot replace it"):
        administer(store, {"action": "add", "public_key": pem(other), "name": "mine"})
    (store.root / "trust").mkdir(exist_ok=True)  # what the deploy login can write: the store's own trust folder
    (store.root / "trust" / "keys").mkdir(exist_ok=True)
    (store.root / "trust" / "keys" / "mine.pub").write_text(pem(other))
    unsigned = release(store, "planted")
    with pytest.raises(ReleaseError, match="signed by key .*, but this device accepts only fleet-2026"):
        store.assemble(unsigned, sign_manifest(unsigned, other, FOR_DEVICE, version=200))


def test_a_root_policy_others_may_write_accepts_nothing(root_policy):
    store, key, folder = root_policy
    (folder / "policy.json").chmod(0o664)
    manifest = release(store, "any")
    with pytest.raises(ReleaseError, match="trust policy is not safe: .* is writable by others than root; nothing is accepted"):
        store.assemble(manifest, sign_manifest(manifest, key, FOR_DEVICE, version=100))


def test_the_policy_folder_cannot_be_moved_by_anyone_but_root(tmp_path):
    """SDK_TRUST_ROOT is honoured for root only: the deploy login and the service always read /etc/perception/trust."""
    if os.geteuid() != 0 or not Path("/usr/bin/python3").exists():
        pytest.skip("needs root to switch to another user, and the system Python")

    def as_nobody() -> None:
        os.setgid(65534)
        os.setgroups([])
        os.setuid(65534)

    script = "import sys; sys.path.insert(0, sys.argv[1]); from sdk.store.trust import trust_root; print(trust_root())"
    done = subprocess.run(
        ["/usr/bin/python3", "-c", script, str(REPO)], env={**os.environ, "SDK_TRUST_ROOT": str(tmp_path)},
        preexec_fn=as_nobody, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    if done.returncode != 0 and "Permission denied" in done.stderr:
        pytest.skip("the checkout is not readable by other users here")
    assert done.stdout.strip() == "/etc/perception/trust", done.stderr
    env = {**os.environ, "SDK_TRUST_ROOT": str(tmp_path)}
    here = subprocess.run([sys.executable, "-c", script, str(REPO)], env=env, capture_output=True, text=True)
    assert here.stdout.strip() == str(tmp_path)


def test_roots_floor_raised_by_a_root_commit_holds_when_the_stores_floor_is_lowered(root_policy):
    """The Mender module commits as root and raises root's floor: a deploy login that edits state.json back cannot
    make an older release acceptable."""
    from sdk.store.trust import advance_root_floor

    store, key, folder = root_policy
    newer, older = release(store, "newer"), release(store, "older")
    commit(store, newer, sign_manifest(newer, key, FOR_DEVICE, version=200))
    assert advance_root_floor("p", 200) and json.loads((folder / "floors.json").read_text()) == {"p": 200}
    state = json.loads((store.root / STATE_FILE).read_text())
    (store.root / STATE_FILE).write_text(json.dumps({**state, "floors": {}}))  # the store's floor lowered by its writer
    with pytest.raises(ReleaseError, match="older than version 200"):
        store.assemble(older, sign_manifest(older, key, FOR_DEVICE, version=100))


def test_the_floor_refuses_the_version_just_below_it_and_accepts_the_same_version_again(trusted):
    """The boundary itself: after version N is committed, N - 1 is a downgrade at install and trial; N again (another
    release of the same version) is not, and is committed."""
    store, key = trusted
    first = release(store, "first")
    commit(store, first, sign_manifest(first, key, FOR_DEVICE, version=200))
    below = release(store, "below")
    signed_below = sign_manifest(below, key, FOR_DEVICE, version=199)
    downgrade = f"release {below.release_id} is version 199 of pipeline 'p', older than version 200 this device has committed: a downgrade is refused"
    with pytest.raises(ReleaseError) as raised:
        store.assemble(below, signed_below)
    assert raised.value.message.startswith(downgrade)  # and whose floor refused it
    folder = store.releases / below.release_id  # assembled behind the check's back: the trial refuses it too
    folder.mkdir()
    (folder / "manifest.json").write_text(below.to_json())
    (folder / "manifest.json.sig").write_text(signed_below)
    with pytest.raises(ReleaseError) as raised:
        store.verify_signature(below.release_id, stage="trial")
    assert raised.value.message.startswith(downgrade)
    same = release(store, "same")
    commit(store, same, sign_manifest(same, key, FOR_DEVICE, version=200))
    assert store.committed() == same.release_id and store.state()["floors"] == {"p": 200}
    assert resolve_startable(store, repair=False).release == same.release_id


def test_a_committed_release_just_below_the_floor_does_not_start_unless_rolled_back_to(trusted):
    """At a start: the committed release of version N - 1 under a floor of N (the floor raised behind it) is refused,
    and so is the release committed before it (a fallback never goes below the floor either); at the floor it starts."""
    store, key = trusted
    first, second = release(store, "first"), release(store, "second")
    commit(store, first, sign_manifest(first, key, FOR_DEVICE, version=100))
    commit(store, second, sign_manifest(second, key, FOR_DEVICE, version=199))
    state = json.loads((store.root / STATE_FILE).read_text())
    (store.root / STATE_FILE).write_text(json.dumps({**state, "floors": {"p": 200}}))
    with pytest.raises(ReleaseError) as raised:
        resolve_startable(store, repair=False)
    assert raised.value.message.startswith("nothing verified can start")
    assert "is version 199 of pipeline 'p', older than version 200 this device has committed" in raised.value.message
    (store.root / STATE_FILE).write_text(json.dumps({**state, "floors": {"p": 199}}))
    assert resolve_startable(store, repair=False).release == second.release_id  # at the floor: it starts


def test_a_key_roots_policy_both_lists_and_revokes_is_not_trusted_and_vouches_for_nothing(root_policy):
    """Root's revocation wins over root's own key list: releases signed by that key are refused, and a rotation it
    signed into the login-writable statements file adds no key (else a revoked key could bring in a fresh one)."""
    from sdk.store.trust import STATEMENTS_FILE, load_policy

    store, key, folder = root_policy
    old, fresh = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    policy = json.loads((folder / "policy.json").read_text())
    policy["keys"].append({"name": "fleet-2025", "public_key": pem(old)})
    policy["revoked"] = [fingerprint(old)]
    with store.locked():
        administer(store, {"action": "install-policy", "policy": policy})
    assert load_policy(store.root).describe()["keys"] == {fingerprint(key): "fleet-2026"}
    # What a stolen deploy login (which holds the revoked key's private half) writes: a rotation signed by it.
    rotation = statement("add", fingerprint(fresh), old, public_key=pem(fresh), name="planted")
    (store.root / "trust").mkdir(exist_ok=True)
    (store.root / "trust" / STATEMENTS_FILE).write_text(json.dumps([rotation]))
    assert load_policy(store.root).describe()["keys"] == {fingerprint(key): "fleet-2026"}
    by_fresh, by_old = release(store, "by-fresh"), release(store, "by-old")
    with pytest.raises(ReleaseError) as raised:
        store.assemble(by_fresh, sign_manifest(by_fresh, fresh, FOR_DEVICE, version=100))
    assert raised.value.message == (
        f"release {by_fresh.release_id} is signed by key {fingerprint(fresh)}, but this device accepts only fleet-2026 {fingerprint(key)}"
    )
    with pytest.raises(ReleaseError, match=re.escape(f"is signed by key {fingerprint(old)}, which this device revoked")):
        store.assemble(by_old, sign_manifest(by_old, old, FOR_DEVICE, version=100))
    with store.locked(), pytest.raises(ReleaseError, match="not signed by a key this device trusts"):
        administer(store, {"action": "add", "public_key": pem(fresh), "statement": rotation})
    good = release(store, "good")
    commit(store, good, sign_manifest(good, key, FOR_DEVICE, version=100))  # the key root trusts still works
    assert store.committed() == good.release_id


@pytest.mark.parametrize("what", ["file", "folder"])
def test_a_root_policy_or_its_folder_owned_by_another_user_accepts_nothing(root_policy, what):
    """Writable by root alone is not enough: a policy (or its folder) another user owns is that user's to change."""
    store, key, folder = root_policy
    path = folder / "policy.json" if what == "file" else folder
    os.chown(path, 65534, 65534)
    manifest = release(store, "any")
    with pytest.raises(ReleaseError) as refused:
        store.assemble(manifest, sign_manifest(manifest, key, FOR_DEVICE, version=100))
    assert refused.value.message == f"the device's trust policy is not safe: {path} is not owned by root; nothing is accepted"


def test_a_root_policy_key_past_its_expiry_signs_nothing_and_one_expiring_today_still_does(root_policy):
    """`expires` is the last day a key is trusted (UTC); an expiry that cannot be read is no promise: not trusted."""
    import datetime

    store, key, folder = root_policy
    original = json.loads((folder / "policy.json").read_text())
    for _ in range(2):  # a run that straddles midnight (UTC) has seen two days: it is run again, on the new one
        today = datetime.datetime.now(datetime.timezone.utc).date()
        keys = {name: Ed25519PrivateKey.generate() for name in ("expired", "today", "unreadable")}
        expiry = {"expired": str(today - datetime.timedelta(days=1)), "today": str(today), "unreadable": "next spring"}
        policy = {**original, "keys": original["keys"] + [{"name": n, "public_key": pem(k), "expires": expiry[n]} for n, k in keys.items()]}
        with store.locked():
            administer(store, {"action": "install-policy", "policy": policy})
        for name in ("expired", "unreadable"):
            manifest = release(store, f"{name}-{today}")
            with pytest.raises(ReleaseError) as refused:
                store.assemble(manifest, sign_manifest(manifest, keys[name], FOR_DEVICE, version=100))
            assert f"is signed by key {fingerprint(keys[name])}, but this device accepts only " in refused.value.message
            assert fingerprint(keys[name]) not in refused.value.message.split("accepts only ")[1]
        manifest = release(store, f"today-{today}")
        try:
            commit(store, manifest, sign_manifest(manifest, keys["today"], FOR_DEVICE, version=100))
        except ReleaseError:
            if datetime.datetime.now(datetime.timezone.utc).date() != today:
                continue
            raise
        assert store.committed() == manifest.release_id
        return
    pytest.fail("the date changed during both runs")
