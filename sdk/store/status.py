"""What `store status` says: the records, the pointers, the lease, and what is damaged on disk.

A mixin of ReleaseStore (sdk/store/objects.py), beside Activation (sdk/store/activation.py); read only.
"""

from __future__ import annotations

from sdk.store.activation import LAST_TRIAL_FILE, TMP_PREFIX, TRIAL_FILE, previous_of
from sdk.store.lease import read_lease


class StoreStatus:
    def status(self) -> dict:
        from sdk.store.trust_admin import floor_status  # only `status` reads the floors: a start that runs a release does not

        folders = self.releases.iterdir() if self.releases.is_dir() else ()
        releases = sorted(p.name for p in folders if not p.name.startswith(TMP_PREFIX))
        state, trial = self.state(), self.trial()
        lease = read_lease(self.root)
        return {
            "current": self.current(),
            "committed": state["committed"],
            "previous": previous_of(state),
            "trial": {**trial, "stale": self.trial_liveness(trial)} if trial else None,  # stale: why it can no longer finish
            "last_trial": self._read_json(LAST_TRIAL_FILE),
            "history": state["history"],
            "releases": releases,
            "lease": {"owner": lease.owner, "token": lease.token} if lease is not None and lease.live() else None,
            "damaged": self.damage(state),
            "floors": floor_status(self.root),  # which version floor holds, and whose it is (root's or the deploy login's)
        }

    def damage(self, state: dict | None = None) -> list[str]:
        """What is wrong on disk with the records and pointers, in words (recovery repairs each when it can write)."""
        state = state if state is not None else self.state()
        found = [state["damaged"]] if "damaged" in state else []
        if (self.root / TRIAL_FILE).exists() and self.trial() is None:
            found.append(f"{TRIAL_FILE} is damaged: the trial it recorded can never be committed")
        found += [d for d in (self.link_damage(name) for name in ("committed", "current", "previous")) if d]
        trial = self.trial()
        expected = {"committed": state["committed"], "previous": previous_of(state)}
        expected["current"] = trial["release"] if trial is not None and self.trial_liveness(trial) is None else state["committed"]
        for name, release in expected.items():  # a step cut short (a kill between a record and its links)
            actual = self._link_target(name)
            if actual != release and not self.link_damage(name):
                found.append(f"`{name}` names {actual or 'nothing'}, the records say {release or 'nothing'}: recovery puts it back")
        return found
