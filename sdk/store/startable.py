"""What may start on this device: the committed release, found by reading, verified, before anything runs.

Every entry point that starts or runs a release goes through here (`sdk start` and the supervisor's every
(re)start, the systemd unit's start, a selftest, the runtime's own start-up):

1. **Resolve by reading.** state.json names the committed release (when it is damaged, the `committed` link,
   which is derived from it); a trial is never what starts, live or not. Nothing is written to decide, so a
   full disk, a read-only store or a process stuck holding the store's mutex cannot stop the committed release
   from starting.
2. **Repair where the disk allows.** Recovery (roll back a trial that can no longer finish, put the links back,
   rebuild a damaged state.json) is then tried under the store's mutex with a short wait; when it cannot write,
   the start goes on and says why the repair waits (`notes`). It is done by the next start that can write.
3. **Verify the bytes and the signature.** The release folder is checked against its manifest (sdk/store/verify.py), and
   its signature against the device's trust policy (sdk/store/trust.py: the key, the binding, the version floor). When the committed
   release fails, the policy recorded at its commit (the pipeline's `service.if_damaged`) decides: `previous`
   (the default) starts the newest earlier committed release that verifies and is not below the version floor,
   and says so (an older release runs only when someone chose it: `sdk rollback`); `refuse` starts nothing.
   When nothing verified can start: one ReleaseError saying why, and nothing runs. Every byte is hashed at
   every start: nothing cached, nothing written (decision 0950).

`allowed_to_run` is the runtime's own start-up check of a release folder inside a store: its bytes verified,
and the release committed (or committed before), or the release of a trial that may still finish.
"""

from __future__ import annotations

import errno
from dataclasses import dataclass, field
from pathlib import Path

from sdk.errors import ReleaseError
from sdk.store.offline_env import verify_env
from sdk.store.verify import verify_release

REPAIR_WAIT_S = 5.0  # a start waits this long for the store's mutex before it goes on without the repair
CANNOT_WRITE = (errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EPERM, errno.EIO)


@dataclass(frozen=True)
class Startable:
    release: str
    folder: Path
    committed: str  # what state.json names; `release` differs when the committed release failed its check
    notes: tuple[str, ...] = field(default_factory=tuple)  # damage found, repairs that wait, a fallback taken

    def describe(self) -> dict:
        return {"release": self.release, "committed": self.committed, "notes": list(self.notes)}


def try_recover(store) -> str | None:
    """`recover()` under the store's mutex where the disk allows; None when done, else why the repair waits."""
    from sdk.store.objects import StoreBusy

    try:
        with store.locked(wait_s=REPAIR_WAIT_S):
            store.recover()
    except StoreBusy as exc:
        return exc.message
    except OSError as exc:
        if exc.errno not in CANNOT_WRITE:
            raise
        return f"the store cannot be written ({exc.strerror or exc}): the repair is done by the next start that can write"
    return None


def resolve_startable(store, *, repair: bool = True) -> Startable:
    """The release to start (see the module's docstring), or ReleaseError when nothing verified can start."""
    notes: list[str] = []
    if repair:
        waits = try_recover(store)
        if waits:
            notes.append(f"recovery waits: {waits}")
    state = store.state()
    notes += [f"damaged: {d}" for d in store.damage(state)]
    committed = state["committed"]
    if committed is None:
        why = f" ({state['damaged']})" if "damaged" in state else ""
        raise ReleaseError(f"{store.root}: no release has passed its health check here (none is committed){why}", hint="deploy one first")
    candidates = [committed]
    policy = state.get("if_damaged") or "previous"
    if policy == "previous":
        candidates += [r for r in reversed(state["history"]) if r != committed]
    failed = []
    for release in candidates:
        try:
            verify_release(store.release_dir(release))
            unverified = verify_env(store.env_dir(release))  # its offline environment, against the record of its build
            if unverified:
                notes.append(unverified)
            # The device's trust policy: key, binding, version floor (a fallback never goes below it: sdk/store/floors.py).
            store.verify_signature(release, stage="start" if release == committed else "fallback")
        except ReleaseError as exc:
            failed.append(exc.message)
            continue
        if release != committed:
            notes.append(f"the committed release {committed} failed its check ({failed[0]}); started {release}, committed before it")
        return Startable(release, store.release_dir(release), committed, tuple(notes))
    tried = "; ".join(failed)
    if any("a fallback never goes below it" in f for f in failed):
        hint = f"deploy release {committed}'s pipeline again; to run an older release on purpose, use `sdk rollback`"
        raise ReleaseError(f"nothing verified can start: {tried}", hint=hint)
    if policy == "refuse":
        raise ReleaseError(f"nothing verified can start: {tried} (if_damaged: refuse)", hint=f"deploy release {committed}'s pipeline again")
    raise ReleaseError(f"nothing verified can start: {tried}", hint=f"deploy release {committed}'s pipeline again")


def store_root_of(folder: Path) -> Path | None:
    """The store a release folder belongs to (`<root>/releases/<id>`), or None for a folder outside any store."""
    folder = Path(folder).resolve()
    root = folder.parent.parent
    if folder.parent.name == "releases" and (root / "store").is_dir():
        return root
    return None


def allowed_to_run(folder: Path) -> None:
    """The runtime's own start-up check (`sdk run --release`, `sdk serve --release`, `sdk selftest --release`): the
    folder's bytes verified; inside a store, the release committed (now or before) or on a trial that may finish."""
    from sdk.store.objects import ReleaseStore

    folder = Path(folder).resolve()
    root = store_root_of(folder)
    verify_release(folder, strict=root is not None)
    if root is None:
        return
    store = ReleaseStore(root)
    verify_env(store.env_dir(folder.name))
    release = folder.name
    state = store.state()
    if release == state["committed"] or release in state["history"]:
        store.verify_signature(release, stage="start")
        return
    trial = store.trial()
    if trial is not None and trial.get("release") == release and store.trial_liveness(trial) is None:
        store.verify_signature(release, stage="trial")
        return
    raise ReleaseError(
        f"release {release} is neither committed nor on a live trial in the store at {root}: it never passed its health check here",
        hint="deploy it (the trial checks it first), or start the committed release (sdk start)",
    )


__all__ = ["Startable", "allowed_to_run", "resolve_startable", "store_root_of", "try_recover"]
