"""A running service follows the store: when the release that may start is no longer the one it runs, it gives way.

A rollback, a commit, or a committed release found damaged change what may start (sdk/startable.py). The runtime
looks at state.json's identity (inode, length, modification time) once per status interval, a stat; only when
that changed does it resolve the store again (by reading, verification cached). When the answer is another
release, or nothing verified, the runtime stops cleanly with EXIT_RELEASE_CHANGED: its supervisor (or systemd,
Restart=on-failure) starts what may start now, so the service, the store and the systemd unit agree within
a status interval and a restart.
"""

from __future__ import annotations

import os
from pathlib import Path

from sdk.activation import STATE_FILE


class StoreFollower:
    def __init__(self, release_dir: Path) -> None:
        from sdk.startable import store_root_of

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
        from sdk.startable import resolve_startable
        from sdk.store import ReleaseStore

        try:
            chosen = resolve_startable(ReleaseStore(self.root), repair=False)
        except ReleaseError as exc:
            return f"release {self.release} is no longer the one to run, and nothing verified can start: {exc.message}"
        if chosen.release == self.release:
            return None
        return f"the release to run is now {chosen.release} (committed: {chosen.committed}); release {self.release} gives way"


__all__ = ["StoreFollower"]
