"""A running service follows the store: when the release that may start is no longer the one it runs, it gives way;
its supervisor chooses that release before every (re)start and on SIGHUP (`FollowsTheStore`).

A rollback, a commit, or a committed release found damaged change what may start (sdk/store/startable.py). The runtime
looks at state.json's identity (inode, length, modification time) once per status interval, a stat; only when
that changed does it resolve the store again (by reading, verification cached). When the answer is another
release, or nothing verified, the runtime stops cleanly with EXIT_RELEASE_CHANGED: its supervisor (or systemd,
Restart=on-failure) starts what may start now, so the service, the store and the systemd unit agree within
a status interval and a restart.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from sdk.service.files import SUPERVISOR_FILE, read_json
from sdk.store.activation import STATE_FILE


class StoreFollower:
    def __init__(self, release_dir: Path) -> None:
        from sdk.store.startable import store_root_of

        self.release = Path(release_dir).resolve().name
        self.root = store_root_of(release_dir)
        self._seen = self._identity()

    def _identity(self) -> tuple | None:
        if self.root is None:
            return None
        try:
            st = os.stat(self.root / STATE_FILE)
        except OSError:
            return None
        return (st.st_ino, st.st_size, st.st_mtime_ns)

    def gives_way(self) -> str | None:
        """Why this runtime must stop for another release (or for none), or None while it is the one to run."""
        if self.root is None:
            return None  # a release outside a store (a development run): nothing to follow
        identity = self._identity()
        if identity == self._seen:
            return None
        self._seen = identity
        from sdk.errors import ReleaseError
        from sdk.store.objects import ReleaseStore
        from sdk.store.startable import resolve_startable

        try:
            chosen = resolve_startable(ReleaseStore(self.root), repair=False)
        except ReleaseError as exc:
            return f"release {self.release} is no longer the one to run, and nothing verified can start: {exc.message}"
        if chosen.release == self.release:
            return None
        return f"the release to run is now {chosen.release} (committed: {chosen.committed}); release {self.release} gives way"


class FollowsTheStore:
    """The supervisor's half (sdk/service/supervisor.py): before every (re)start, and on SIGHUP, it chooses the
    release that may start now; it needs `root`, `release`, `notes`, `note()`, `child`, `status_dir` and the state
    fields of Supervisor."""

    def _said_last_end(self) -> None:
        """An earlier supervisor that ended without recording it (SIGKILL, a power cut) is said now."""
        before = read_json(self.status_dir / SUPERVISOR_FILE) or {}
        if before.get("state") in ("starting", "running", "restarting"):
            self.note(f"the previous supervisor (pid {before.get('pid')}) ended without a word: killed (SIGKILL) or the power went")

    def _choose(self) -> bool:
        """With a store: the release that may start now (read, repaired where the disk allows, verified). False
        (state failed, the reason said) when nothing verified can start."""
        if self.root is None:
            return True
        from sdk.errors import ReleaseError
        from sdk.store.objects import ReleaseStore
        from sdk.store.startable import resolve_startable

        try:
            chosen = resolve_startable(ReleaseStore(self.root))
        except ReleaseError as exc:
            self.state, self.last_reason, self.last_error = "failed", exc.message, exc.message
            self.note(f"nothing starts: {exc.message}")
            return False
        for text in chosen.notes:
            if text not in self.notes:
                self.note(text)
        self.notes = list(chosen.notes)
        if self.release != chosen.folder:
            if self.release is not None:
                self.note(f"switching from {self.release.name} to {chosen.release}, the release to run now")
            self.release = chosen.folder
            self.service = None  # the new release's own service settings
        return True

    def _reload_now(self) -> None:
        """SIGHUP: when the release to run now is another, the child is stopped and the loop starts that one."""
        if self.root is None:
            self.note("SIGHUP: reload asked; this supervisor runs one pinned release (--release): nothing to reload")
            return
        from sdk.errors import ReleaseError
        from sdk.store.objects import ReleaseStore
        from sdk.store.startable import resolve_startable

        try:
            chosen = resolve_startable(ReleaseStore(self.root), repair=False)
        except ReleaseError as exc:
            chosen, why = None, exc.message
        if chosen is not None and chosen.folder == self.release:
            self.note(f"SIGHUP: reload; {chosen.release} is still the release to run")
            return
        self.note(f"SIGHUP: reload; {'switching to ' + chosen.release if chosen else 'nothing verified can start: ' + why}")
        self._switching = True
        if self.child is not None and self.child.poll() is None:
            self.child.send_signal(signal.SIGTERM)


__all__ = ["FollowsTheStore", "StoreFollower"]
