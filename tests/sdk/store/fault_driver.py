"""The device side of one deploy, step by step in one process, for the kill-point tests.

    python fault_driver.py ROOT SCENARIO RELEASE [RELEASE]

`deploy`: lease, trial of RELEASE (its real health run), commit, prune to one kept release,
rollback (its hashes checked). `failing`: lease and the trial of RELEASE, whose health check fails.
`SDK_FAULT=NAME[:K]` kills this process with SIGKILL at that point (sdk/faults.py).
"""

import sys
from pathlib import Path

from sdk.store import ReleaseStore
from sdk.trial import HealthPolicy, run_trial


def main(root: str, scenario: str, release: str) -> None:
    store = ReleaseStore(Path(root))
    holder = store.acquire(f"fault-driver:{scenario}", lease_s=600)
    outcome = run_trial(store, release, token=holder.token, owner="fault-driver", target="local", policy=HealthPolicy(min_frames=2, timeout_s=60))
    if scenario == "failing":
        assert not outcome["healthy"], outcome
        return
    assert outcome["healthy"], outcome
    with store.locked():
        store.commit(token=holder.token)
    with store.locked():
        store.prune(1, token=holder.token)
    with store.locked():
        store.rollback(token=holder.token)
    holder.end()


if __name__ == "__main__":
    main(*sys.argv[1:4])
