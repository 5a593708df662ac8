"""The version floor: which one binds a release at each stage, and whose it is (decision 0951).

Two floors per pipeline, the higher binds:

- **the store's** (`state.json`, raised by every commit): written by the deploy login, so a stolen login can lower it;
- **root's** (root's policy's `floors`, and `floors.json` beside it, raised by root's own steps: the Mender module's
  commit and the `raise-floors` trust step): nothing the deploy login or the service writes lowers it.

`sdk rollback` (the deploy login's deliberate step, recorded as `rolled_back`) may go below the store's floor, never
below root's. A fallback (`service.if_damaged: previous`, the device's own choice when the committed release fails its
check) never goes below either: an older release runs only when someone chose it.
"""

from __future__ import annotations

from sdk.errors import ReleaseError

FLOORS_FILE = "floors.json"  # root's, beside root's policy


def check_floor(state: dict, root_floors: dict[str, int], release: str, version: int, pipeline: str, stage: str) -> None:
    """Refuse a release older than the floor that binds at `stage` (install, trial, start, fallback, rollback)."""
    store_floor = int((state.get("floors") or {}).get(pipeline, 0))
    root_floor = int(root_floors.get(pipeline, 0))
    chosen = stage == "rollback" or (stage == "start" and state.get("rolled_back") == release)
    floor = root_floor if chosen else max(store_floor, root_floor)
    if version >= floor:
        return
    whose = "root's floor (the device's trust policy)" if root_floor >= floor else "the store's floor"
    if stage == "fallback":
        raise ReleaseError(
            f"release {release} is version {version} of pipeline {pipeline!r}, below {whose}, version {floor}: a fallback never goes below it",
            hint="deploy the pipeline again; to run the older release on purpose, use `sdk rollback`",
        )
    if chosen:
        raise ReleaseError(
            f"release {release} is version {version} of pipeline {pipeline!r}, below {whose}, version {floor}: "
            "the deploy login cannot go below it, not even by `sdk rollback`",
            hint="deploy a newer release; only root lowers root's floor (the floors of its policy and its floors.json)",
        )
    raise ReleaseError(
        f"release {release} is version {version} of pipeline {pipeline!r}, older than version {floor} this device has committed: "
        f"a downgrade is refused ({whose})",
        hint="deploy a newer release; to go back on purpose, use `sdk rollback` on the device's own previous release",
    )


def summary(state: dict, root_floors: dict[str, int], rooted: bool) -> dict:
    """`sdk status`: per pipeline the floor that holds, the store's and root's, and whose holds; a note in words."""
    store = {str(k): v for k, v in (state.get("floors") or {}).items() if isinstance(v, int)}
    rows = {}
    for name in sorted(set(store) | set(root_floors)):
        mine, roots = store.get(name, 0), root_floors.get(name, 0)
        held = "root" if rooted and roots >= mine else "store"
        rows[name] = {"floor": max(mine, roots), "store": mine, "root": roots if rooted else None, "held_by": held}
    if not rooted:
        note = "no root policy on this device: the version floor is the deploy login's (state.json), which a stolen login can lower"
    elif any(row["held_by"] == "store" for row in rows.values()):
        note = "root's floor holds only up to its version; above it the floor is the deploy login's: raise root's with the `raise-floors` root step"
    else:
        note = "root's floor holds (its policy, and the floors root's own steps raised): the deploy login cannot lower it"
    return {"held_by": "root" if rooted else "store", "note": note, "pipelines": rows}


__all__ = ["FLOORS_FILE", "check_floor", "summary"]
