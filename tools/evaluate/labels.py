"""Labelled images as users keep them, read into one form: COCO detection JSON with an image folder, an Ultralytics
YOLO dataset (its YAML: `path`, `val`, `names`; one `.txt` per image under `labels/` where the image is under
`images/`, rows `class cx cy w h` normalised to the image), KITTI 2D object labels (a `label_2` folder beside
`image_2`) or MOTChallenge per-frame labels (`gt.txt`, the frames from the video or the sequence's frame folder).

Each becomes a `LabelSet`: the images (id, file, size) in the labels' order and COCO's ground-truth dictionary, boxes in
pixels `[x, y, w, h]`, crowd and ignore regions kept (`iscrowd: 1`). Everything is checked before any image runs: a
bad file is one error naming the file, the entry, the value and what is allowed.
"""

from __future__ import annotations

from pathlib import Path

from sdk.errors import ConfigError
from tools.evaluate.coco_labels import load_coco
from tools.evaluate.kitti_labels import is_kitti_folder, load_kitti
from tools.evaluate.labelset import IMAGES_FLAG, LabelledImage, LabelSet
from tools.evaluate.mot_labels import load_mot
from tools.evaluate.yolo_labels import load_yolo

FORMATS = "a COCO detection JSON file, an Ultralytics dataset YAML, a KITTI label_2 folder or a MOTChallenge gt.txt"


def load_labels(labels: Path, images: Path | None = None, images_from: str = IMAGES_FLAG) -> LabelSet:
    """A COCO JSON file (`images`: its image folder; default `images/` beside it, else its own folder), a YOLO dataset
    YAML (its `val` split), a KITTI label folder (`images`: default image_2 beside it) or a MOTChallenge gt.txt
    (`images`: the video or frame folder; default the sequence's img1/). `images_from`: where errors say the images
    were given (`--images`, or a pipeline file's `evaluation.images`)."""
    labels = Path(labels)
    if labels.is_dir():
        if not is_kitti_folder(labels):
            raise ConfigError(f"--labels {labels}: a folder without KITTI label files (.txt)", hint=f"give {FORMATS}")
        found = load_kitti(labels, images, images_from)
    elif not labels.is_file():
        raise ConfigError(f"--labels {labels}: no such file or folder", hint=f"give {FORMATS}")
    elif labels.suffix.lower() in (".yaml", ".yml"):
        if images is not None:
            raise ConfigError(
                f"{images_from} {images}: a YOLO dataset names its own images (`path` and `val` in {labels.name})",
                hint=f"leave out {images_from.rpartition(': ')[2]}",
            )
        found = load_yolo(labels)
    elif labels.suffix.lower() == ".txt":
        found = load_mot(labels, images, images_from)
    else:
        found = load_coco(labels, images, images_from)
    if not found.images:
        raise ConfigError(f"{labels}: the label set holds no images", hint="an evaluation needs at least one labelled image")
    return found


__all__ = ["FORMATS", "LabelSet", "LabelledImage", "load_labels"]
