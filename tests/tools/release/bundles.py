"""Small releases for store tests: a Bundle of the given file contents."""

from __future__ import annotations

from pathlib import Path

from tools.release.bundle import Bundle


def bundle_of(folder: Path, contents: dict[str, bytes]) -> Bundle:
    folder.mkdir(parents=True, exist_ok=True)
    files = {}
    for name, data in contents.items():
        path = folder / name.replace("/", "__")
        path.write_bytes(data)
        files[name] = path
    return Bundle(files, "pipeline/p.yaml", "artifacts", {"test": True})
