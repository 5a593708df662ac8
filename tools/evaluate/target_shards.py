"""The labelled images as a fleet runs them (`sdk evaluate --target T|GROUP`): which targets, and which image each
target's part names how. The run itself is tools/validation/evaluate_targets.py (it uses the fleet deploy's pool
and sessions, a room above this one); `sdk evaluate` is given it by the command line (tools/cli)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from sdk.errors import ConfigError
from tools.evaluate.detect import DetectionRun
from tools.evaluate.labelset import LabelSet

PARTIAL_FLAG = "--allow-partial"


@dataclass
class TargetsRun:
    run: DetectionRun  # the merged detections, in the labels' order
    shards: list[dict] = field(default_factory=list)  # report.json's `targets`: which target ran which images
    not_run: list[str] = field(default_factory=list)  # images of failed parts (only with `partial`)


# (pipeline, labels, class map, target name, progress, partial) -> the targets' run
OnTargets = Callable[..., TargetsRun]


def shard_names(part: LabelSet) -> dict[str, object]:
    """The device's file name of each image of a part -> the image: numbered in the labels' order (the replay's name
    order is the part's order, and two folders' images of the same name stay apart), the original name after it."""
    return {f"{k:06d}-{image.path.name}": image for k, image in enumerate(part.images)}


def check_target_labels(labels: LabelSet, target: str) -> None:
    """Only image files travel to a target: a video's frames (MOTChallenge over a video) are refused before anything runs."""
    if any(image.frame is not None for image in labels.images):
        raise ConfigError(
            f"--labels {labels.source}: its frames are in a video; --target {target} runs image files only",
            hint="give the sequence's frame folder (img1/) with --images, or evaluate with --target local",
        )


def resolve_fleet(name: str) -> list:
    """The targets `name` names (a target, a comma list or a group); an empty group is one error naming it."""
    from tools.targets import GROUPS_FILE, groups, resolve_targets, targets_dir

    known = groups()
    empty = [part.strip() for part in name.split(",") if part.strip() in known and not known[part.strip()]]
    if empty:
        raise ConfigError(
            f"--target {name}: group {empty[0]!r} in {targets_dir() / GROUPS_FILE} has no target; allowed: a group of at least one target",
            hint=f"list its targets in {GROUPS_FILE} ({empty[0]}: [orin-01, orin-02]), or name a target",
        )
    return resolve_targets(name)


__all__ = ["PARTIAL_FLAG", "OnTargets", "TargetsRun", "check_target_labels", "resolve_fleet", "shard_names"]
