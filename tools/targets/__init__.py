"""Targets a pipeline deploys to: `local` (built in), files in `targets/NAME.yaml`, groups in `targets/groups.yaml`;
the records every session reads (what is done to a target over a connection is tools/connect/)."""

from __future__ import annotations

import difflib
import os
import re
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from sdk.errors import ConfigError, TargetError
from sdk.spec.loader import config_error
from sdk.spec.yaml_source import read_yaml
from tools.state import state_dir
from tools.targets.spec import TargetSpec

TARGET_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
BUILT_IN = ("local",)
GROUPS_FILE = "groups.yaml"


@dataclass(frozen=True)
class LocalTarget:
    """Same layout as a vehicle's remote root, under the host's state folder."""

    name: str
    root: Path


@dataclass(frozen=True)
class RemoteTarget:
    name: str
    spec: TargetSpec
    path: Path  # the target file

    def host_path(self, relative: str) -> Path:
        """A host-side file named in the target file (key, known_hosts): `~` expands, relative is beside the file."""
        path = Path(os.path.expanduser(relative))
        return path if path.is_absolute() else (self.path.parent / path).resolve()

    @property
    def root(self) -> str:
        return self.spec.remote_root.rstrip("/") or "/"


Target = LocalTarget | RemoteTarget


def targets_dir() -> Path:
    return Path(os.environ.get("SDK_TARGETS_DIR") or "targets").resolve()


def _check_name(name: str) -> None:
    if not TARGET_NAME.match(name):
        raise TargetError(
            f"invalid target name {name!r}: use letters, digits, '-' and '_' (at most 64)",
            hint=f"known targets: {', '.join(known_targets())}",
        )


def known_targets() -> list[str]:
    folder = targets_dir()
    files = sorted(p.stem for p in folder.glob("*.yaml") if p.name != GROUPS_FILE and TARGET_NAME.match(p.stem)) if folder.is_dir() else []
    return [*BUILT_IN, *files]


def load_target_file(name: str) -> RemoteTarget:
    path = targets_dir() / f"{name}.yaml"
    document = read_yaml(path)
    try:
        spec = TargetSpec.model_validate(document.data)
    except ValidationError as exc:
        raise config_error(document, exc, TargetSpec) from None
    return RemoteTarget(name, spec, path)


LABGRID_PREFIX = "labgrid:"
LABGRID_DEFAULTS = "labgrid.yaml"  # key, host-key pin, remote_root, platform for `--target labgrid:PLACE`


def labgrid_target(place: str) -> RemoteTarget:
    """`--target labgrid:PLACE`: targets/labgrid.yaml's settings for the place PLACE (coordinator: $LG_COORDINATOR)."""
    path = targets_dir() / LABGRID_DEFAULTS
    if not path.is_file():
        raise TargetError(
            f"--target labgrid:{place}: {path} does not exist",
            hint="it holds what every labgrid place shares: key_file, host_key (known_hosts of the bench), remote_root, platform",
        )
    document = read_yaml(path)
    data = dict(document.data or {})
    data["labgrid"] = {**(data.get("labgrid") or {}), "place": place}
    if os.environ.get("LG_COORDINATOR"):
        data["labgrid"]["coordinator"] = os.environ["LG_COORDINATOR"]
    try:
        spec = TargetSpec.model_validate(data)
    except ValidationError as exc:
        raise config_error(document, exc, TargetSpec) from None
    return RemoteTarget(f"{LABGRID_PREFIX}{place}", spec, path)


def resolve_target(name: str) -> Target:
    if name.startswith(LABGRID_PREFIX):
        return labgrid_target(name.removeprefix(LABGRID_PREFIX))
    _check_name(name)
    if name == "local":
        return LocalTarget("local", state_dir() / "targets" / "local")
    if not (targets_dir() / f"{name}.yaml").is_file():
        raise unknown_target(name)
    return load_target_file(name)


def unknown_target(name: str) -> TargetError:
    """`unknown target 'orin-1'; did you mean 'orin-01'? known targets: local, orin-01`, with how to add one."""
    known = known_targets()
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    suggestion = f"; did you mean {close[0]!r}? " if close else "; "
    example = targets_dir() / f"{name}.yaml.example"
    if example.is_file():
        hint = f"{example} is an example: copy it to {example.with_suffix('')} and edit it, or run `sdk targets add {name} ...`"
    else:
        hint = f"target files are {targets_dir()}/NAME.yaml; add one with `sdk targets add {name} --host H --user U --key K`"
    return TargetError(f"unknown target {name!r}{suggestion}known targets: {', '.join(known)}", hint=hint)


def groups() -> dict[str, list[str]]:
    path = targets_dir() / GROUPS_FILE
    if not path.is_file():
        return {}
    data = read_yaml(path).data
    for group, members in data.items():
        if not isinstance(members, list) or not all(isinstance(m, str) for m in members):
            raise ConfigError(f"{path}: {group}: a group is a list of target names")
    return {str(k): list(v) for k, v in data.items()}


def resolve_targets(text: str) -> list[Target]:
    """`orin-01`, `orin-01,orin-02`, or a group name from groups.yaml; duplicates removed, order kept."""
    names: list[str] = []
    known_groups = groups()
    for part in (p.strip() for p in text.split(",")):
        members = known_groups.get(part, [part])
        names.extend(m for m in members if m not in names)
    if not names:
        raise TargetError("no target given")
    return [resolve_target(name) for name in names]
