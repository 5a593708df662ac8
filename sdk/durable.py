"""What makes a rename survive a power cut: the folder that holds it, synced. Standard library only (the release
store runs on the device's bare Python)."""

from __future__ import annotations

import os
from pathlib import Path


def fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


__all__ = ["fsync_dir"]
