"""Where the host keeps its state: prepared-model cache and local targets (`./.sdk`, or $SDK_STATE_DIR)."""

from __future__ import annotations

import os
from pathlib import Path


def state_dir() -> Path:
    return Path(os.environ.get("SDK_STATE_DIR") or ".sdk").resolve()


def cache_dir() -> Path:
    return state_dir() / "cache"


def shared_cache_dir() -> Path:
    """Where what depends on this machine and this SDK, never on a project, is cached: the host's measured peaks
    (`host-peaks/`) and the release runtime's bytecode (`bytecode/`). $SDK_SHARED_CACHE, a folder every state folder
    of the machine may share, else the state's cache."""
    shared = os.environ.get("SDK_SHARED_CACHE")
    return Path(shared).resolve() if shared else cache_dir()
