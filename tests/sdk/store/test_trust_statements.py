"""Trust statements (`add`, `revoke`) are bound to one device and numbered: a statement made for one vehicle applies to
no other, a replayed one is refused, and an earlier SDK's unbound statement still reads where it was recorded, except
that under root's policy it adds no key (sdk/store/trust.py: statement_problem)."""

from __future__ import annotations

import json

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from sdk.errors import ReleaseError
from sdk.store.trust import load_policy
from sdk.store.trust_admin import administer
from tests.sdk.store import test_trust as base
from tests.sdk.store.test_trust import fingerprint, pem, statement

trusted, root_policy = base.trusted, base.root_policy  # the fixtures of the trust tests


def add(store, new: Ed25519PrivateKey, signer: Ed25519PrivateKey, **extra) -> dict:
    rotation = statement("add", fingerprint(new), signer, public_key=pem(new), **extra)
    with store.locked():
        return administer(store, {"action": "add", "public_key": pem(new), "statement": rotation})


def plant(store, *statements: dict) -> None:
    """What the deploy login can do: write the store's statements file by hand."""
    path = store.root / "trust" / "statements.json"
    kept = json.loads(path.read_text()) if path.exists() else []
    path.write_text(json.dumps([*kept, *statements]))


def test_a_statement_made_for_another_vehicle_is_refused_and_planted_it_is_ignored(trusted):
    store, key = trusted
    new = Ed25519PrivateKey.generate()
    with pytest.raises(ReleaseError, match="does not apply to this device: it is made for target 'orin-02'; this device is 'orin-01'"):
        add(store, new, key, target="orin-02")
    with pytest.raises(ReleaseError, match="made for device_type 'jetson-thor'"):
        add(store, new, key, device_type="jetson-thor")
    plant(store, statement("add", fingerprint(new), key, public_key=pem(new), target="orin-02"))
    assert fingerprint(new) not in load_policy(store.root).keys


def test_a_replayed_statement_is_refused_and_planted_it_is_ignored(trusted):
    store, key = trusted
    second, third = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    early = statement("add", fingerprint(third), key, public_key=pem(third))  # made first, kept back
    add(store, second, key)
    sequence = load_policy(store.root).sequence
    assert sequence > early["sequence"]
    with pytest.raises(ReleaseError, match=f"sequence number {early['sequence']} is not above {sequence}.*a replayed statement"), store.locked():
        administer(store, {"action": "add", "public_key": pem(third), "statement": early})
    revoke = statement("revoke", fingerprint(second), key)
    with store.locked():
        administer(store, {"action": "revoke", "statement": revoke})
        with pytest.raises(ReleaseError, match="a replayed statement"):
            administer(store, {"action": "revoke", "statement": revoke})  # the very same statement, again
    plant(store, early)
    assert fingerprint(third) not in load_policy(store.root).keys


def test_an_earlier_sdks_statement_still_reads_where_it_was_recorded_but_is_taken_no_more(trusted):
    store, key = trusted
    new = Ed25519PrivateKey.generate()
    legacy = statement("add", fingerprint(new), key, public_key=pem(new), device_type=None, target=None, sequence=None)
    with pytest.raises(ReleaseError, match="names no device and no sequence number"):
        add(store, new, key, device_type=None, target=None, sequence=None)
    plant(store, legacy)  # as an earlier SDK recorded it on this device
    assert fingerprint(new) in load_policy(store.root).keys


def test_under_roots_policy_an_earlier_sdks_add_adds_no_key(root_policy):
    store, key, _ = root_policy
    new = Ed25519PrivateKey.generate()
    (store.root / "trust").mkdir(exist_ok=True)
    plant(store, statement("add", fingerprint(new), key, public_key=pem(new), device_type=None, target=None, sequence=None))
    assert fingerprint(new) not in load_policy(store.root).keys
    add(store, new, key)  # bound to this device and numbered: root's key vouches for it
    assert fingerprint(new) in load_policy(store.root).keys
