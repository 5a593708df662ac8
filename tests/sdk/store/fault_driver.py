"""The device side of one deploy, step by step in one process, for the kill-point tests.

    python fault_driver.py ROOT SCENARIO RELEASE

`deploy`: lease, trial of RELEASE (its real health run), commit, prune to one kept release, rollback (its
hashes checked). `failing`: lease and the trial of RELEASE, whose health check fails. `stage`: a new release
made of RELEASE's files and one more, its new object installed and the release assembled. `damaged-current`:
the trial of RELEASE passes, then `current` is found pointing elsewhere (damage) when the commit re-points it.
`recover`: the recovery every entry point runs. `SDK_FAULT=NAME[:K]` kills this process with SIGKILL at that
point (sdk/store/faults.py).
"""

import dataclasses
import hashlib
import os
import sys
from pathlib import Path

from sdk.release import FileEntry, ReleaseManifest
from sdk.store.objects import ReleaseStore
from sdk.store.trial import HealthPolicy, run_trial


def stage(store: ReleaseStore, release: str) -> None:
    data = b"one more file: a release of its own\n"
    sha256 = hashlib.sha256(data).hexdigest()
    source = store.root / "extra.txt"
    source.write_bytes(data)
    manifest = ReleaseManifest.load(store.release_dir(release))
    with store.locked():
        store.add_file(source, sha256)
        store.assemble(dataclasses.replace(manifest, files={**manifest.files, "extra.txt": FileEntry(sha256, len(data))}))


def main(root: str, scenario: str, release: str) -> None:
    store = ReleaseStore(Path(root))
    if scenario == "recover":
        with store.locked():
            store.recover()
        return
    if scenario == "stage":
        stage(store, release)
        return
    holder = store.acquire(f"fault-driver:{scenario}", lease_s=600)
    outcome = run_trial(store, release, token=holder.token, owner="fault-driver", target="local", policy=HealthPolicy(min_frames=2, timeout_s=60))
    if scenario == "failing":
        assert not outcome["healthy"], outcome
        return
    assert outcome["healthy"], outcome
    if scenario == "damaged-current":
        committed = store.committed()
        os.symlink(f"releases/{committed}", store.root / "current.damage")
        os.replace(store.root / "current.damage", store.root / "current")
    with store.locked():
        store.commit(token=holder.token)
    if scenario == "damaged-current":
        return
    with store.locked():
        store.prune(1, token=holder.token)
    with store.locked():
        store.rollback(token=holder.token)
    holder.end()


if __name__ == "__main__":
    main(*sys.argv[1:4])
