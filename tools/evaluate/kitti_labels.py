"""KITTI 2D object labels as a `LabelSet`: a `label_2` folder of `NNNNNN.txt` files beside the `image_2` folder of
the images of the same names.

Each row is `type truncated occluded alpha left top right bottom height width length x y z rotation_y [score]`;
only the type, truncation, occlusion and the 2D box (pixels, right and bottom exclusive as floats) are read. The
types are categories with fixed ids (KITTI's eight: Car 1, Van 2, Truck 3, Pedestrian 4, Person_sitting 5,
Cyclist 6, Tram 7, Misc 8; any other type name gets the next id, in sorted order). `DontCare` areas become COCO
ignore regions (`iscrowd: 1`), one for every category, so that COCOeval ignores a detection of any class that lies in
one (its overlap counted over the detection's own area), rather than scoring it a false positive. Each label keeps
`truncated` (0 to 1) and `occluded` (0 fully visible, 1 partly, 2 largely, 3 unknown) for the recall bins.
"""

from __future__ import annotations

import re
from pathlib import Path

from sdk.errors import ConfigError
from tools.evaluate.labelset import IMAGES_FLAG, LabelledImage, LabelSet, check_box, given_with, image_files, image_size

KITTI_TYPES = ("Car", "Van", "Truck", "Pedestrian", "Person_sitting", "Cyclist", "Tram", "Misc")
DONT_CARE = "DontCare"
OCCLUSION = (0, 1, 2, 3)
TYPE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")
HINT = "a KITTI row: type truncated occluded alpha left top right bottom h w l x y z rotation_y (15 fields; a 16th is a score)"


def is_kitti_folder(path: Path) -> bool:
    return path.is_dir() and any(p.suffix == ".txt" for p in path.iterdir())


def load_kitti(folder: Path, images: Path | None, images_from: str = IMAGES_FLAG) -> LabelSet:
    """`folder`: the label_2 folder; `images`: the image folder (default: image_2 beside label_2); `images_from`: where
    errors say the image folder was given (`--images`, or a pipeline file's `evaluation.images`)."""
    image_folder = images if images is not None else folder.parent / "image_2"
    if not Path(image_folder).is_dir():
        raise ConfigError(f"{images_from} {image_folder}: no such folder", hint=f"give the KITTI image_2 folder {given_with(images_from)}")
    files = sorted(p for p in folder.iterdir() if p.suffix == ".txt")
    by_stem = {p.stem: p for p in image_files(Path(image_folder))}
    missing = [f for f in files if f.stem not in by_stem]
    if missing:
        raise ConfigError(
            f"{folder}: {len(missing)} of {len(files)} label files have no image in {image_folder}, e.g. {missing[0].name}",
            hint=f"give the image folder {given_with(images_from)} (an image has the label file's name: 000042.txt, 000042.png)",
        )
    rows = {f: _rows(f) for f in files}
    names = sorted({row[0] for found in rows.values() for row in found} - set(KITTI_TYPES) - {DONT_CARE})
    categories = {i + 1: name for i, name in enumerate((*KITTI_TYPES, *names))}
    ids = {name: cid for cid, name in categories.items()}
    labelled, annotations, regions = [], [], 0
    for image_id, file in enumerate(files, start=1):
        image = LabelledImage(image_id, by_stem[file.stem], *image_size(by_stem[file.stem], folder))
        labelled.append(image)
        for number, (kind, truncated, occluded, box) in enumerate(rows[file], start=1):
            x, y, w, h = box[0], box[1], box[2] - box[0], box[3] - box[1]
            check_box(x, y, w, h, image, f"{file}:{number}")
            common = {"image_id": image_id, "bbox": [x, y, w, h], "area": w * h}
            if kind == DONT_CARE:
                regions += 1
                annotations += [{**common, "category_id": cid, "iscrowd": 1, "dontcare": True} for cid in categories]
            else:
                annotations.append({**common, "category_id": ids[kind], "iscrowd": 0, "truncated": truncated, "occluded": occluded})
    for number, annotation in enumerate(annotations, start=1):
        annotation["id"] = number
    notes = [f"{regions} DontCare area(s): each ignores the detections of every class inside it"] if regions else []
    return LabelSet(folder, "kitti", labelled, categories, annotations, notes)


def _rows(file: Path) -> list[tuple[str, float, int, tuple[float, float, float, float]]]:
    rows = []
    for number, line in enumerate(file.read_text(encoding="utf-8").splitlines(), start=1):
        fields = line.split()
        if not fields:
            continue
        where = f"{file}:{number}"
        if len(fields) not in (15, 16):
            raise ConfigError(f"{where}: {len(fields)} fields; allowed: 15 (16 with a score)", hint=HINT)
        kind = fields[0]
        if not TYPE_NAME.fullmatch(kind):
            raise ConfigError(f"{where}: type {kind!r}; allowed: a name such as {', '.join(KITTI_TYPES[:3])} or {DONT_CARE}", hint=HINT)
        try:
            truncated, occluded = float(fields[1]), int(fields[2])
            box = tuple(float(v) for v in fields[4:8])
        except ValueError:
            raise ConfigError(
                f"{where}: truncated {fields[1]!r}, occluded {fields[2]!r}, box {' '.join(fields[4:8])!r} are not numbers", hint=HINT
            ) from None
        if kind != DONT_CARE:
            if not 0.0 <= truncated <= 1.0:
                raise ConfigError(f"{where}: truncated {fields[1]}; allowed: 0 to 1 (-1 only for {DONT_CARE})", hint=HINT)
            if occluded not in OCCLUSION:
                raise ConfigError(f"{where}: occluded {fields[2]}; allowed: 0, 1, 2 or 3 (-1 only for {DONT_CARE})", hint=HINT)
        rows.append((kind, truncated, occluded, box))
    return rows


__all__ = ["DONT_CARE", "KITTI_TYPES", "is_kitti_folder", "load_kitti"]
