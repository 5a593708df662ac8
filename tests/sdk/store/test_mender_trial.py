"""A Mender trial has no lease: it spans module invocations, and only its deadline or a reboot ends it."""

from __future__ import annotations

import json
import time

from sdk.store.activation import MENDER_OWNER
from sdk.store.objects import ReleaseStore
from tests.sdk.store.test_lease import hold, staged


def committed_and_trial(tmp_path, owner: str, deadline_s: float = 60) -> tuple[ReleaseStore, str, str]:
    root = tmp_path / "target"
    store = ReleaseStore(root)
    first, second = (staged(root, tmp_path / "src", label) for label in ("first", "second"))
    with store.locked():
        store.begin_trial(first, token=None, owner=MENDER_OWNER, deadline_s=60)
        store.mark_passed(token=None, health={"healthy": True}, commit_within_s=60)
        store.commit(token=None)
        store.begin_trial(second, token=None, owner=owner, deadline_s=deadline_s)
    return store, first, second


def test_a_mender_trial_outlives_its_process_while_within_its_deadline(tmp_path):
    store, first, second = committed_and_trial(tmp_path, MENDER_OWNER)
    assert store.recover() is None  # no lease was ever taken for it: still live
    assert store.current() == second and store.status()["trial"]["stale"] is None
    # A deploy that comes and goes (its lease ends and rolls back *its* trial) leaves the Mender trial alone.
    holder, token = hold(store.root, "a deploy", 60)
    holder.stdin.close()
    assert json.loads(holder.stdout.readline())["rolled_back"] is None
    assert store.recover() is None and store.current() == second
    with store.locked():
        store.mark_passed(token=None, health={"healthy": True}, commit_within_s=60)
        assert store.commit(token=None) == second
    assert store.state() == {"committed": second, "history": [first, second], "if_damaged": "previous"}


def test_a_mender_trial_past_its_deadline_or_from_an_earlier_boot_is_rolled_back(tmp_path):
    store, first, second = committed_and_trial(tmp_path, MENDER_OWNER, deadline_s=0.2)
    time.sleep(0.3)
    assert store.recover() == second and store.current() == first
    assert store.status()["last_trial"]["reason"] == "the trial ran past its deadline"

    with store.locked():
        store.begin_trial(second, token=None, owner=MENDER_OWNER, deadline_s=60)
    trial = json.loads((store.root / "trial.json").read_text())
    (store.root / "trial.json").write_text(json.dumps({**trial, "boot": "an-earlier-boot"}))
    assert store.recover() == second and store.current() == first
    assert store.status()["last_trial"]["reason"] == "the device restarted during the trial"


def test_a_tokenless_trial_of_any_other_owner_is_still_judged_by_a_lease(tmp_path):
    store, first, second = committed_and_trial(tmp_path, "host:1234")
    assert store.recover() == second and store.current() == first
    assert "lease ended" in store.status()["last_trial"]["reason"]


def test_a_second_trial_is_refused_while_one_may_still_finish(tmp_path):
    """One trial at a time: while a release is on a live trial, another begins no trial of its own; the first keeps
    its record and `current`."""
    import pytest

    from sdk.errors import ReleaseError
    from tests.sdk.store.test_lease import staged

    store, first, second = committed_and_trial(tmp_path, MENDER_OWNER)
    third = staged(store.root, tmp_path / "src", "third")
    before = (store.root / "trial.json").read_bytes()
    with store.locked(), pytest.raises(ReleaseError) as refused:
        store.begin_trial(third, token=None, owner=MENDER_OWNER, deadline_s=60)
    assert refused.value.message == f"another release ({second}) is on trial on the target"
    assert (store.root / "trial.json").read_bytes() == before and store.current() == second and store.committed() == first
