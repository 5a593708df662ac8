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


def open_new(path: Path, mode: str = "w", permissions: int = 0o644):
    """A fresh file at `path` for a write-then-rename, opened as a file object: whatever was planted at that name
    (a link, a FIFO, a file) is removed first, never written through (O_CREAT | O_EXCL | O_NOFOLLOW): in a folder
    another user can write, a process (root's, say) writes only its own new file."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except IsADirectoryError:
        raise FileExistsError(17, "a folder stands where a temporary file belongs", str(path)) from None
    access = os.O_RDWR if "+" in mode else os.O_WRONLY
    fd = os.open(path, access | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, permissions)
    return os.fdopen(fd, mode)


__all__ = ["fsync_dir", "open_new"]
