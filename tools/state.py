"""Where the host keeps its state: prepared-model cache and local targets (`./.sdk`, or $SDK_STATE_DIR)."""

from __future__ import annotations

import os
from pathlib import Path


def state_dir() -> Path:
    return Path(os.environ.get("SDK_STATE_DIR") or ".sdk").resolve()


def cache_dir() -> Path:
    return state_dir() / "cache"
