"""Paths named in a file stay inside that file's folder."""


from pathlib import Path

from sdk.errors import ConfigError


def confined_path(root: Path, relative: str, *, where: str) -> Path:
    """`root / relative`, resolved (symlinks too), or ConfigError if it leaves `root`."""
    if not relative or "\x00" in relative:
        raise ConfigError(f"{where}: empty or invalid path {relative!r}")
    candidate = Path(relative)
    if candidate.is_absolute():
        raise ConfigError(
            f"{where}: absolute path {relative!r} is not allowed",
            hint=f"use a path relative to {root}",
        )
    root = root.resolve()
    resolved = (root / candidate).resolve()
    if resolved != root and root not in resolved.parents:
        raise ConfigError(
            f"{where}: path {relative!r} leaves the folder {root}",
            hint="keep the files a pipeline uses inside its own folder (copy them there)",
        )
    return resolved
