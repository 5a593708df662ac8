"""Pruning the release store: old releases and the objects nothing links to any more, never half-way.

A mixin of ReleaseStore (sdk/store/objects.py), beside Activation (sdk/store/activation.py): it uses the store's records
(`state`, `trial`, `current`), its fencing and its atomic writes.
"""

from __future__ import annotations

import os
import shutil

from sdk.durable import fsync_dir
from sdk.store.activation import STATE_FILE, TMP_PREFIX, TRASH, UPLOAD_PREFIX, previous_of, state_record
from sdk.store.faults import point


class Pruning:
    def prune(self, keep: int = 3, *, token: int | None = None) -> list[str]:
        """Remove releases beyond the newest `keep` committed ones (never the committed, previous or trial
        release), then store objects no remaining release links to. Each release is first renamed out of
        reach, then deleted: a kill mid-prune never leaves a half-deleted release where it could run."""
        self._fence(token)
        state, trial = self.state(), self.trial() or {}
        keep_ids = set(state["history"][-keep:]) | {state["committed"], previous_of(state), self.current()}
        keep_ids |= {trial.get("release"), trial.get("fallback")}
        removed = sorted(f.name for f in self.releases.iterdir() if not f.name.startswith(TMP_PREFIX) and f.name not in keep_ids)
        if removed:  # first out of the history (nothing points at them any more), then out of reach
            self._write_json(STATE_FILE, state_record(state, history=[r for r in state["history"] if r not in removed]))
            point("prune.state-written")
        trash = self.root / TRASH
        trash.mkdir(exist_ok=True)
        for name in removed:
            os.replace(self.releases / name, trash / f"release-{name}-{os.getpid()}")
            point("prune.release-moved")
        envs = self.root / "envs"
        for env in sorted(envs.iterdir()) if envs.is_dir() else ():
            if env.name not in keep_ids and not env.name.startswith(TMP_PREFIX):
                os.replace(env, trash / f"env-{env.name}-{os.getpid()}")
        fsync_dir(self.releases)
        self._empty_trash()
        used = {os.stat(p).st_ino for folder in self.releases.iterdir() for p in folder.rglob("*") if p.is_file()}
        for obj in sorted(self.objects.iterdir()):
            if obj.name.startswith(UPLOAD_PREFIX) or (not obj.name.startswith(TMP_PREFIX) and obj.stat().st_ino not in used):
                obj.unlink()
                point("prune.object-deleted")
        return removed

    def _empty_trash(self) -> None:
        trash = self.root / TRASH
        for entry in sorted(trash.iterdir()) if trash.is_dir() else ():
            shutil.rmtree(entry, ignore_errors=True)
            point("prune.release-deleted")
