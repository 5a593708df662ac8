"""One step of the version-floor scenario (tests/sdk/store/test_floors.py), run as root or as the deploy login in a
private mount namespace whose /etc/perception/trust is the test's own. Prints one JSON line: what the step saw.

    floor_driver.py WORK STEP [ARG]

WORK holds `releases.json` ({label: {"files": {name: [source, sha256, size]}, "signature": text}}) and the store at
WORK/root. Steps: `policy` (root), `commit LABEL` (login), `raise-floors` (root), `attack` (login).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from sdk.errors import ReleaseError
from sdk.release import FileEntry, ReleaseManifest
from sdk.store.activation import STATE_FILE
from sdk.store.objects import ReleaseStore
from sdk.store.startable import resolve_startable
from sdk.store.trust_admin import administer, install_policy


def manifest_of(spec: dict) -> ReleaseManifest:
    files = {name: FileEntry(sha, size) for name, (_, sha, size) in spec["files"].items()}
    return ReleaseManifest(files, "pipeline/p.yaml", "artifacts", {})


def refused(step) -> str | None:
    try:
        step()
    except ReleaseError as exc:
        return exc.message
    return None


def main() -> None:
    work, step = Path(sys.argv[1]), sys.argv[2]
    releases = json.loads((work / "releases.json").read_text())
    store = ReleaseStore(work / "root")
    if step == "policy":
        print(json.dumps(install_policy(json.loads((work / "policy.json").read_text()))))
        return
    if step == "raise-floors":
        with store.locked():
            print(json.dumps(administer(store, {"action": "raise-floors"})))
        return
    if step == "commit":
        spec = releases[sys.argv[3]]
        store.ensure()
        for source, sha, _ in spec["files"].values():
            store.add_file(Path(source), sha)
        manifest = manifest_of(spec)
        with store.locked():
            store.assemble(manifest, spec["signature"])
            store.verify_signature(manifest.release_id, stage="trial")
            store.begin_trial(manifest.release_id, token=None, owner="test", deadline_s=600)
            store.mark_passed(token=None, health={"healthy": True}, commit_within_s=600)
            store.commit(token=None)
        print(json.dumps({"committed": manifest.release_id, "floors": store.status()["floors"]}))
        return
    # attack: the deploy login lowers the store's floor, replays an older signed release, then rolls back by hand
    out = {"status_floors": store.status()["floors"]}  # what `sdk status` says before
    state = json.loads((store.root / STATE_FILE).read_text())
    (store.root / STATE_FILE).write_text(json.dumps({**state, "floors": {}}))
    older = releases["older"]
    for source, sha, _ in older["files"].values():
        store.add_file(Path(source), sha)
    with store.locked():
        out["install"] = refused(lambda: store.assemble(manifest_of(older), older["signature"]))
    first = manifest_of(releases["first"]).release_id
    out["rollback"] = refused(lambda: store.rollback())
    written = {"committed": first, "history": [first], "rolled_back": first}  # what `rollback` would have written
    (store.root / STATE_FILE).write_text(json.dumps(written))
    out["start"] = refused(lambda: resolve_startable(store, repair=False))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
