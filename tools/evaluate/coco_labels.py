"""COCO detection JSON (`images`, `annotations`, `categories`) with its image folder, as a `LabelSet`."""

from __future__ import annotations

import json
from pathlib import Path

from sdk.errors import ConfigError
from tools.evaluate.labelset import IMAGES_FLAG, LabelledImage, LabelSet, check_box, given_with


def _read_json(path: Path) -> object:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"{path}: not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}", hint="a COCO detection file is one JSON object"
        ) from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not a text file (UTF-8)", hint="give a COCO detection JSON file") from None


def _number(value: object, where: str, path: Path) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{path}: {where}: {value!r} is not a number", hint="COCO boxes are [x, y, width, height] in pixels")
    return float(value)


def load_coco(path: Path, images: Path | None, images_from: str = IMAGES_FLAG) -> LabelSet:
    data = _read_json(path)
    if not isinstance(data, dict) or not all(isinstance(data.get(k), list) for k in ("images", "annotations", "categories")):
        raise ConfigError(
            f"{path}: not a COCO detection file; allowed: an object with the lists `images`, `annotations` and `categories`",
            hint="give instances_*.json as COCO writes it",
        )
    folder = images if images is not None else (path.parent / "images" if (path.parent / "images").is_dir() else path.parent)
    if not Path(folder).is_dir():
        raise ConfigError(f"{images_from} {folder}: no such folder", hint="give the folder that holds the images the labels name")
    categories: dict[int, str] = {}
    for i, category in enumerate(data["categories"]):
        if not isinstance(category, dict) or not isinstance(category.get("id"), int) or not isinstance(category.get("name"), str):
            raise ConfigError(f"{path}: categories[{i}]: {category!r}; allowed: {{id: integer, name: text}}", hint="check the file")
        categories[category["id"]] = category["name"]
    found = [_coco_image(entry, i, path, Path(folder)) for i, entry in enumerate(data["images"])]
    missing = [image.path for image in found if not image.path.is_file()]
    if missing:
        raise ConfigError(
            f"{path}: {len(missing)} of {len(found)} labelled images are not in {folder}, e.g. {missing[0].name}",
            hint=f"give the image folder {given_with(images_from)} (COCO's file_name is relative to it)",
        )
    by_id = {image.id: image for image in found}
    if len(by_id) != len(found):
        raise ConfigError(f"{path}: image ids repeat", hint="each entry of `images` needs its own id")
    annotations = [_coco_annotation(a, i, path, by_id, categories) for i, a in enumerate(data["annotations"])]
    return LabelSet(path, "coco", found, categories, annotations)


def _coco_image(entry: object, index: int, path: Path, folder: Path) -> LabelledImage:
    if not isinstance(entry, dict) or not isinstance(entry.get("id"), int) or not isinstance(entry.get("file_name"), str):
        raise ConfigError(f"{path}: images[{index}]: needs an integer id and a file_name", hint="check the file")
    width, height = entry.get("width"), entry.get("height")
    if not isinstance(width, int) or not isinstance(height, int) or width < 1 or height < 1:
        raise ConfigError(
            f"{path}: images[{index}] ({entry['file_name']}): width {width!r}, height {height!r}; allowed: whole numbers above 0",
            hint="check the file",
        )
    return LabelledImage(entry["id"], folder / entry["file_name"], width, height)


def _coco_annotation(entry: object, index: int, path: Path, images: dict[int, LabelledImage], categories: dict[int, str]) -> dict:
    where = f"annotations[{index}]"
    if not isinstance(entry, dict):
        raise ConfigError(f"{path}: {where}: {entry!r} is not an object", hint="check the file")
    image = images.get(entry.get("image_id"))
    if image is None:
        raise ConfigError(f"{path}: {where}: image_id {entry.get('image_id')!r} is not in `images`", hint="every annotation names a listed image")
    if entry.get("category_id") not in categories:
        raise ConfigError(
            f"{path}: {where}: category_id {entry.get('category_id')!r} is not in `categories`", hint="every annotation names a listed category"
        )
    bbox = entry.get("bbox")
    if not isinstance(bbox, list) or len(bbox) != 4:
        raise ConfigError(f"{path}: {where}: bbox {bbox!r}; allowed: [x, y, width, height] in pixels", hint="check the file")
    x, y, w, h = (_number(v, f"{where}.bbox", path) for v in bbox)
    check_box(x, y, w, h, image, f"{path}: {where} ({image.path.name})")
    area = entry.get("area")
    area = _number(area, f"{where}.area", path) if area is not None else w * h
    crowd = entry.get("iscrowd", 0)
    return {
        "id": entry.get("id", index + 1),
        "image_id": image.id,
        "category_id": entry["category_id"],
        "bbox": [x, y, w, h],
        "area": area,
        "iscrowd": 1 if crowd else 0,
    }


__all__ = ["load_coco"]
