"""Labelled images as users keep them, read into one form: COCO detection JSON with an image folder, or an Ultralytics
YOLO dataset (its YAML: `path`, `val`, `names`; one `.txt` per image under `labels/` where the image is under
`images/`, rows `class cx cy w h` normalised to the image).

Both become a `LabelSet`: the images (id, file, size) in the labels' order and COCO's ground-truth dictionary, boxes in
pixels `[x, y, w, h]`, crowd regions kept (`iscrowd: 1`; YOLO has none). Everything is checked before any image runs:
a bad file is one error naming the file, the entry, the value and what is allowed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from sdk.errors import ConfigError
from sdk.sources.images import IMAGE_SUFFIXES

EDGE_SLACK_PX = 1.0  # labels are rounded: a box may run this far past the image's edge


@dataclass(frozen=True)
class LabelledImage:
    id: int
    path: Path
    width: int
    height: int


@dataclass
class LabelSet:
    source: Path  # the labels file (COCO JSON or the dataset YAML)
    format: str  # "coco" or "yolo"
    images: list[LabelledImage]
    categories: dict[int, str]  # category id -> name
    annotations: list[dict] = field(default_factory=list)  # COCO's: id, image_id, category_id, bbox, area, iscrowd

    def ground_truth(self) -> dict:
        """COCO's ground-truth dictionary (pycocotools' `COCO.dataset`)."""
        return {
            "images": [{"id": i.id, "width": i.width, "height": i.height, "file_name": i.path.name} for i in self.images],
            "categories": [{"id": cid, "name": name} for cid, name in self.categories.items()],
            "annotations": self.annotations,
        }


def load_labels(labels: Path, images: Path | None = None) -> LabelSet:
    """A COCO JSON file (`images`: its image folder; default `images/` beside it, else its own folder) or a YOLO
    dataset YAML (its `val` split)."""
    labels = Path(labels)
    if not labels.is_file():
        raise ConfigError(f"--labels {labels}: no such file", hint="give a COCO detection JSON file or an Ultralytics dataset YAML")
    if labels.suffix.lower() in (".yaml", ".yml"):
        if images is not None:
            raise ConfigError(
                f"--images {images}: a YOLO dataset names its own images (`path` and `val` in {labels.name})", hint="leave out --images"
            )
        from tools.evaluate.yolo_labels import load_yolo

        found = load_yolo(labels)
    else:
        found = load_coco(labels, images)
    if not found.images:
        raise ConfigError(f"{labels}: the label set holds no images", hint="an evaluation needs at least one labelled image")
    return found


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


def load_coco(path: Path, images: Path | None) -> LabelSet:
    data = _read_json(path)
    if not isinstance(data, dict) or not all(isinstance(data.get(k), list) for k in ("images", "annotations", "categories")):
        raise ConfigError(
            f"{path}: not a COCO detection file; allowed: an object with the lists `images`, `annotations` and `categories`",
            hint="give instances_*.json as COCO writes it",
        )
    folder = images if images is not None else (path.parent / "images" if (path.parent / "images").is_dir() else path.parent)
    if not Path(folder).is_dir():
        raise ConfigError(f"--images {folder}: no such folder", hint="give the folder that holds the images the labels name")
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
            hint="give the image folder with --images (COCO's file_name is relative to it)",
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


def check_box(x: float, y: float, w: float, h: float, image: LabelledImage, where: str) -> None:
    """A box with a positive size, inside its image (within the labels' rounding)."""
    if w <= 0 or h <= 0:
        raise ConfigError(
            f"{where}: box [{x:g}, {y:g}, {w:g}, {h:g}] has width or height {min(w, h):g}; allowed: above 0", hint="fix or drop the label"
        )
    if x < -EDGE_SLACK_PX or y < -EDGE_SLACK_PX or x + w > image.width + EDGE_SLACK_PX or y + h > image.height + EDGE_SLACK_PX:
        raise ConfigError(
            f"{where}: box [{x:g}, {y:g}, {w:g}, {h:g}] leaves the {image.width}x{image.height} image; allowed: inside it",
            hint="labels are in the image's own pixels: check the image or the label's coordinates",
        )


def image_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)


__all__ = ["LabelSet", "LabelledImage", "check_box", "image_files", "load_coco", "load_labels"]
