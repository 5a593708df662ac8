"""Labelled images as users keep them, read into one form: COCO detection JSON with an image folder, or an Ultralytics
YOLO dataset (its YAML: `path`, `val`, `names`; one `.txt` per image under `labels/` where the image is under
`images/`, rows `class cx cy w h` normalised to the image).

Both become a `LabelSet`: the images (id, file, size) in the labels' order and COCO's ground-truth dictionary, boxes in
pixels `[x, y, w, h]`, crowd regions kept (`iscrowd: 1`; YOLO has none). Everything is checked before any image runs:
a bad file is one error naming the file, the entry, the value and what is allowed.
"""

from __future__ import annotations

from pathlib import Path

from sdk.errors import ConfigError
from tools.evaluate.coco_labels import load_coco
from tools.evaluate.labelset import LabelledImage, LabelSet
from tools.evaluate.yolo_labels import load_yolo


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
        found = load_yolo(labels)
    else:
        found = load_coco(labels, images)
    if not found.images:
        raise ConfigError(f"{labels}: the label set holds no images", hint="an evaluation needs at least one labelled image")
    return found


__all__ = ["LabelSet", "LabelledImage", "load_labels"]
