"""Files that appear whole or not at all: written under a temporary name, renamed when complete."""

from __future__ import annotations

import os
from pathlib import Path


def partial_path(final: Path) -> Path:
    return final.with_name(f".{final.name}.partial")


def publish(partial: Path, final: Path) -> None:
    """fsync the finished file, rename it into place, fsync the folder (survives power loss)."""
    with partial.open("rb") as handle:
        os.fsync(handle.fileno())
    os.replace(partial, final)
    fd = os.open(final.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
