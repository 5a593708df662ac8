"""An Ultralytics YOLO dataset as a `LabelSet`: the dataset YAML's `path` (relative to the YAML's folder; default that
folder), its `val` split (a folder of images, a list of them, or a `.txt` file listing image paths) and `names`
(a list, or a mapping from class index to name). Each image's labels are the `.txt` of the same name where the last
`images` folder of its path is `labels`: one row `class cx cy w h` per object, normalised to the image. An image
without a label file has no objects (Ultralytics' background images). Boxes are converted to pixels exactly:
x = (cx - w / 2) * width, in float64.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from sdk.errors import ConfigError
from tools.evaluate.labelset import LabelledImage, LabelSet, check_box, image_files, image_size

HINT = "an Ultralytics dataset YAML: path, val (images/val), names; labels/val/NAME.txt rows `class cx cy w h` (normalised)"


def load_yolo(path: Path) -> LabelSet:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not valid YAML: {str(exc).splitlines()[0]}", hint=HINT) from None
    if not isinstance(data, dict) or "val" not in data or "names" not in data:
        raise ConfigError(f"{path}: a YOLO dataset needs the keys `val` and `names`", hint=HINT)
    names = data["names"]
    if isinstance(names, list):
        names = dict(enumerate(names))
    if not isinstance(names, dict) or not names or not all(isinstance(k, int) and isinstance(v, str) for k, v in names.items()):
        raise ConfigError(f"{path}: names: {data['names']!r}; allowed: a list of class names, or index: name", hint=HINT)
    root = path.parent / str(data.get("path") or ".")
    files = _split_images(path, root, data["val"])
    images, annotations = [], []
    for image_id, file in enumerate(files, start=1):
        image = LabelledImage(image_id, file, *image_size(file, path))
        images.append(image)
        for row in _rows(_label_file(file), image, names, path):
            annotations.append({**row, "id": len(annotations) + 1})
    return LabelSet(path, "yolo", images, dict(sorted(names.items())), annotations)


def _split_images(path: Path, root: Path, split: object) -> list[Path]:
    entries = split if isinstance(split, list) else [split]
    files: list[Path] = []
    for entry in entries:
        where = root / str(entry)
        if where.is_dir():
            files += image_files(where)
        elif where.is_file() and where.suffix == ".txt":
            listed = [line.strip() for line in where.read_text(encoding="utf-8").splitlines() if line.strip()]
            files += [(root / line) if not Path(line).is_absolute() else Path(line) for line in listed]
        elif where.is_file():
            files.append(where)
        else:
            raise ConfigError(f"{path}: val: {where} does not exist", hint=f"`val` is relative to `path` ({root})")
    missing = [f for f in files if not f.is_file()]
    if missing:
        raise ConfigError(f"{path}: {len(missing)} listed images do not exist, e.g. {missing[0]}", hint="check the split's list")
    return files


def _label_file(image: Path) -> Path:
    parts = list(image.parts)
    for i in range(len(parts) - 2, -1, -1):
        if parts[i] == "images":
            parts[i] = "labels"
            break
    return Path(*parts).with_suffix(".txt")


def _rows(label: Path, image: LabelledImage, names: dict[int, str], path: Path) -> list[dict]:
    if not label.is_file():
        return []
    rows = []
    for number, line in enumerate(label.read_text(encoding="utf-8").splitlines(), start=1):
        fields = line.split()
        if not fields:
            continue
        where = f"{label}:{number}"
        if len(fields) != 5:
            raise ConfigError(f"{where}: {line.strip()!r} has {len(fields)} fields; allowed: class cx cy w h (segments are not read)", hint=HINT)
        try:
            index = int(fields[0])
            cx, cy, w, h = (float(v) for v in fields[1:])
        except ValueError:
            raise ConfigError(f"{where}: {line.strip()!r} is not a class index and four numbers", hint=HINT) from None
        if index not in names:
            raise ConfigError(
                f"{where}: class index {index} is out of range; allowed: {min(names)} to {max(names)} (`names` in {path.name})",
                hint="add the class to `names` or fix the label",
            )
        x, y = (cx - w / 2) * image.width, (cy - h / 2) * image.height
        bw, bh = w * image.width, h * image.height
        check_box(x, y, bw, bh, image, where)
        rows.append({"image_id": image.id, "category_id": index, "bbox": [x, y, bw, bh], "area": bw * bh, "iscrowd": 0})
    return rows


__all__ = ["load_yolo"]
