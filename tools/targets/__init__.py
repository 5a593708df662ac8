"""Targets a pipeline deploys to. `local` is built in: a release folder on this machine."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from sdk.errors import TargetError
from tools.state import state_dir

TARGET_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
BUILT_IN = ("local",)


@dataclass(frozen=True)
class LocalTarget:
    """Same layout as a vehicle's remote root, under the host's state folder."""

    name: str
    root: Path


def known_targets() -> list[str]:
    return list(BUILT_IN)


def resolve_target(name: str) -> LocalTarget:
    if not TARGET_NAME.match(name):
        raise TargetError(
            f"invalid target name {name!r}: use letters, digits, '-' and '_' (at most 64)",
            hint=f"known targets: {', '.join(known_targets())}",
        )
    if name == "local":
        return LocalTarget("local", state_dir() / "targets" / "local")
    raise TargetError(f"unknown target {name!r}; known targets: {', '.join(known_targets())}")
