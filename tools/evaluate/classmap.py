"""Which label category each of the model's classes is scored against.

By name: a class goes to the category of the same name, compared without case, spaces, underscores and hyphens, with
the four names where Darknet's and VOC's COCO lists differ from COCO's own (`motorbike`, `aeroplane`, `sofa`,
`tvmonitor`); `evaluation.classes` in the pipeline file names the others, and `null` there leaves a class out. So a
model numbering COCO's 80 classes 0-79 (YOLOX, YOLOv5/v8) lands on COCO's category ids 1-90 by their names. A class
that finds no category is an error naming it, never a silent zero; a category no class maps to is left out of the
scores and listed.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from sdk.errors import ConfigError

ALIASES = {"motorbike": "motorcycle", "aeroplane": "airplane", "sofa": "couch", "tvmonitor": "tv"}
MAP_HINT = "name its category in the pipeline file: evaluation: {classes: {CLASS: CATEGORY}}, or CLASS: null to leave it out"


def _key(name: str) -> str:
    folded = "".join(ch for ch in name.lower() if ch not in " _-")
    return ALIASES.get(folded, folded)


@dataclass(frozen=True)
class ClassMap:
    to_category: dict[int, int]  # model class index -> category id (classes left out are absent)
    left_out: tuple[str, ...]  # model classes mapped to null
    unscored: tuple[str, ...]  # label categories no class maps to

    def as_dict(self, classes: tuple[str, ...], categories: dict[int, str]) -> dict:
        return {
            "classes": {classes[i]: {"category_id": c, "category": categories[c]} for i, c in self.to_category.items()},
            "left_out": list(self.left_out),
            "categories_without_class": list(self.unscored),
        }


def check_keys(classes: tuple[str, ...], user_map: dict[str, str | None], where: str) -> None:
    """Every key of evaluation.classes is a class of the model (checked without labels too)."""
    for name in user_map:
        if name not in classes:
            close = difflib.get_close_matches(name, classes, n=1)
            raise ConfigError(
                f"{where}: evaluation.classes: {name!r} is not a class of the model; allowed: the names in postprocess.classes",
                hint=f"did you mean {close[0]!r}?" if close else "the keys are the model's class names, the values the labels' categories",
            )


def map_classes(classes: tuple[str, ...], categories: dict[int, str], user_map: dict[str, str | None], where: str) -> ClassMap:
    """`classes`: the model's, in its order; `categories`: id -> name of the labels; `user_map`: evaluation.classes.
    `where` names the pipeline file in errors."""
    check_keys(classes, user_map, where)
    by_name = {name: cid for cid, name in categories.items()}
    by_key = {_key(name): cid for cid, name in categories.items()}
    mapping: dict[int, int] = {}
    left_out = []
    for index, name in enumerate(classes):
        if name in user_map:
            target = user_map[name]
            if target is None:
                left_out.append(name)
                continue
            if target not in by_name:
                close = difflib.get_close_matches(target, list(by_name), n=1)
                raise ConfigError(
                    f"{where}: evaluation.classes: {name!r} maps to {target!r}, which is not a category of the labels",
                    hint=f"did you mean {close[0]!r}?" if close else f"the labels' categories: {', '.join(list(by_name)[:12])}",
                )
            mapping[index] = by_name[target]
        elif name in by_name or _key(name) in by_key:
            mapping[index] = by_name.get(name, by_key.get(_key(name)))
        else:
            close = difflib.get_close_matches(name, list(by_name), n=1)
            suggestion = f" (the labels have {close[0]!r})" if close else ""
            raise ConfigError(f"{where}: model class {name!r} has no category in the labels{suggestion}", hint=MAP_HINT)
    used = set(mapping.values())
    unscored = tuple(name for cid, name in categories.items() if cid not in used)
    return ClassMap(mapping, tuple(left_out), unscored)


__all__ = ["ALIASES", "ClassMap", "check_keys", "map_classes"]
