"""Where the host keeps its state: prepared-model cache and local targets (`./.sdk`, or $SDK_STATE_DIR)."""

from __future__ import annotations

import os
from pathlib import Path


def state_dir() -> Path:
    return Path(os.environ.get("SDK_STATE_DIR") or ".sdk").resolve()


def cache_dir() -> Path:
    return state_dir() / "cache"


def peaks_cache_dir() -> Path:
    """Where this machine's measured peaks are cached (`host-peaks/` below it): $SDK_HOST_PEAKS_CACHE, a folder every
    state folder of the machine may share (the peaks are the machine's, not a project's), else the state's cache."""
    shared = os.environ.get("SDK_HOST_PEAKS_CACHE")
    return Path(shared).resolve() if shared else cache_dir()
