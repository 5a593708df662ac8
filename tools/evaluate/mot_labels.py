"""MOTChallenge per-frame labels (`gt.txt`) as a `LabelSet`, the frames from the video beside them or a folder of
frames.

A row is `frame,id,left,top,width,height,conf,class,visibility` (frames counted from 1, boxes in pixels). The frames
are the video's (`--images video.mp4`: every frame is a labelled image, through the `file://` source's decoder), or
the sequence's frame folder (`seqinfo.ini`'s `imDir`, `img1/000001.jpg` for frame 1; the default when `--images` is not
given). As MOTChallenge's detection evaluation scores them: pedestrians (class 1) with `conf` 1 are labels;
persons on vehicles, static persons, distractors, reflections and crowds (2, 7, 8, 12, 13) and any row with `conf` 0
are ignore regions (`iscrowd: 1`: a detection on them is neither hit nor miss); occluders (9, 10, 11) are no objects;
cars, bicycles, motorbikes and other vehicles (3, 4, 5, 6) with `conf` 1 are labels of their own category. MOT15's
rows (class and visibility -1) are pedestrians. Boxes running past the image are clipped to it (MOTChallenge labels
people entering and leaving); each label keeps its `visibility` (0 to 1) for the recall bins.
"""

from __future__ import annotations

import configparser
from pathlib import Path

from sdk.errors import ConfigError
from tools.evaluate.labelset import IMAGES_FLAG, LabelledImage, LabelSet, given_with, image_files, image_size

CATEGORIES = {1: "pedestrian", 3: "car", 4: "bicycle", 5: "motorbike", 6: "non_motorized_vehicle"}
IGNORED_AS_PEDESTRIAN = {2: "person_on_vehicle", 7: "static_person", 8: "distractor", 12: "reflection", 13: "crowd"}
OCCLUDERS = {9: "occluder", 10: "occluder_on_ground", 11: "occluder_full"}
VIDEO_SUFFIXES = (".mp4", ".avi", ".mkv", ".mov", ".m4v", ".webm")
HINT = "a MOTChallenge gt.txt row: frame,id,left,top,width,height,conf,class,visibility (frames from 1)"


def load_mot(path: Path, images: Path | None, images_from: str = IMAGES_FLAG) -> LabelSet:
    """`path`: gt.txt; `images`: a video or a folder of frames (default: the sequence's imDir, img1/)."""
    sequence = path.parent.parent if path.parent.name == "gt" else path.parent
    info = _seqinfo(sequence / "seqinfo.ini")
    source = images if images is not None else sequence / info.get("imdir", "img1")
    if not source.exists():
        raise ConfigError(
            f"{images_from} {source}: no such video or folder", hint=f"give the sequence's video (or its frame folder) {given_with(images_from)}"
        )
    rows = _rows(path)
    if source.is_dir():
        frames, width, height = _frame_folder(source, path, info, images_from)
    else:
        frames, width, height = _video(source, path, images_from)
    last = max((row[0] for row in rows), default=0)
    if last > len(frames):
        raise ConfigError(
            f"{path}: labels for frame {last}, but {source.name} has {len(frames)} frames; allowed: frames 1 to {len(frames)}",
            hint="give the video (or frame folder) these labels were made on",
        )
    labelled = [LabelledImage(n, file, width, height, frame) for n, (file, frame) in enumerate(frames, start=1)]
    annotations, clipped = [], 0
    for number, (frame, kind, conf, box, visibility) in enumerate(rows, start=1):
        if kind in OCCLUDERS:
            continue
        x1, y1 = max(box[0], 0.0), max(box[1], 0.0)
        x2, y2 = min(box[0] + box[2], float(width)), min(box[1] + box[3], float(height))
        if x2 <= x1 or y2 <= y1:
            clipped += 1  # wholly outside the image: nothing of it can be seen
            continue
        clipped += (x1, y1, x2, y2) != (box[0], box[1], box[0] + box[2], box[1] + box[3])
        ignore = kind in IGNORED_AS_PEDESTRIAN or conf == 0
        category = 1 if kind in IGNORED_AS_PEDESTRIAN or kind == -1 else kind
        annotation = {"image_id": frame, "category_id": category, "bbox": [x1, y1, x2 - x1, y2 - y1], "area": (x2 - x1) * (y2 - y1)}
        annotation |= {"iscrowd": 1 if ignore else 0, "id": number}
        if visibility is not None:
            annotation["visibility"] = visibility
        annotations.append(annotation)
    notes = [f"{clipped} label(s) ran past the {width}x{height} image and were clipped to it (or left out when wholly outside)"] if clipped else []
    return LabelSet(path, "mot", labelled, dict(CATEGORIES), annotations, notes)


def _seqinfo(path: Path) -> dict[str, str]:
    if not path.is_file():
        return {}
    parser = configparser.ConfigParser()
    try:
        parser.read(path, encoding="utf-8")
    except configparser.Error as exc:
        raise ConfigError(
            f"{path}: not a MOTChallenge seqinfo.ini: {str(exc).splitlines()[0]}", hint="[Sequence] imDir, seqLength, imWidth, imHeight"
        ) from None
    return dict(parser["Sequence"]) if parser.has_section("Sequence") else {}


def _rows(path: Path) -> list[tuple[int, int, float, tuple[float, float, float, float], float | None]]:
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        fields = [f.strip() for f in line.split(",")]
        where = f"{path}:{number}"
        if len(fields) not in (9, 10):
            raise ConfigError(f"{where}: {len(fields)} fields; allowed: 9 (MOT16-20) or 10 (MOT15)", hint=HINT)
        try:
            frame, conf, kind = int(float(fields[0])), float(fields[6]), int(float(fields[7]))
            box = tuple(float(v) for v in fields[2:6])
            visibility = float(fields[8])
        except ValueError:
            raise ConfigError(f"{where}: {line.strip()!r} is not numbers", hint=HINT) from None
        if frame < 1:
            raise ConfigError(f"{where}: frame {fields[0]}; allowed: 1 or more (MOTChallenge counts frames from 1)", hint=HINT)
        if box[2] <= 0 or box[3] <= 0:
            raise ConfigError(f"{where}: box width {fields[4]}, height {fields[5]}; allowed: above 0", hint="fix or drop the row")
        known = {-1, *CATEGORIES, *IGNORED_AS_PEDESTRIAN, *OCCLUDERS}
        if kind not in known:
            raise ConfigError(f"{where}: class {fields[7]}; allowed: 1 to 13 (MOTChallenge's classes), or -1 (MOT15)", hint=HINT)
        if kind != -1 and not 0.0 <= visibility <= 1.0:
            raise ConfigError(f"{where}: visibility {fields[8]}; allowed: 0 to 1", hint=HINT)
        rows.append((frame, kind, conf, box, None if kind == -1 else visibility))
    return rows


def _frame_folder(folder: Path, path: Path, info: dict[str, str], images_from: str) -> tuple[list[tuple[Path, None]], int, int]:
    files = {}
    for file in image_files(folder):
        if file.stem.isdigit():
            files[int(file.stem)] = file
    if not files:
        raise ConfigError(
            f"{folder}: no frames named by their number (000001.jpg)", hint=f"give the sequence's video or img1/ folder {given_with(images_from)}"
        )
    count = max(files)
    gaps = [n for n in range(1, count + 1) if n not in files]
    if gaps:
        raise ConfigError(f"{folder}: frame {gaps[0]} is missing ({len(gaps)} of {count})", hint="every frame from 1 to the last is needed")
    if "imwidth" in info and "imheight" in info:
        width, height = int(info["imwidth"]), int(info["imheight"])
    else:
        width, height = image_size(files[1], path)
    return [(files[n], None) for n in range(1, count + 1)], width, height


def _video(video: Path, path: Path, images_from: str) -> tuple[list[tuple[Path, int]], int, int]:
    import cv2

    if video.suffix.lower() not in VIDEO_SUFFIXES:
        raise ConfigError(f"{images_from} {video}: not a video; allowed: {', '.join(VIDEO_SUFFIXES)} or a folder of frames", hint=HINT)
    capture = cv2.VideoCapture(str(video))
    try:
        count = int(capture.get(cv2.CAP_PROP_FRAME_COUNT)) if capture.isOpened() else 0
        width, height = int(capture.get(cv2.CAP_PROP_FRAME_WIDTH)), int(capture.get(cv2.CAP_PROP_FRAME_HEIGHT))
    finally:
        capture.release()
    if count < 1 or width < 1 or height < 1:
        raise ConfigError(f"{path}: video {video} does not open (or has no frames)", hint="check the file; a frame folder works too")
    return [(video, n) for n in range(count)], width, height


__all__ = ["CATEGORIES", "load_mot"]
