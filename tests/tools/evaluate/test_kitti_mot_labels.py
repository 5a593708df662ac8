"""KITTI 2D object labels and MOTChallenge per-frame labels read into the one form: rows converted exactly, KITTI's
DontCare areas ignoring the detections of every class inside them, MOTChallenge's ignore classes and clipped boxes,
and bad rows refused in one error naming the file, the line, the value and what is allowed."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest

from sdk.errors import ConfigError
from tools.evaluate import metrics
from tools.evaluate.labels import load_labels

TAIL = "1.50 1.60 3.90 1.0 1.5 20.0 0.1"  # KITTI's 3D fields, not read


def _kitti(tmp_path: Path, rows: dict[str, list[str]]) -> Path:
    (tmp_path / "image_2").mkdir()
    (tmp_path / "label_2").mkdir()
    for stem, lines in rows.items():
        cv2.imwrite(str(tmp_path / "image_2" / f"{stem}.png"), np.full((100, 200, 3), 80, np.uint8))
        (tmp_path / "label_2" / f"{stem}.txt").write_text("".join(f"{line}\n" for line in lines))
    return tmp_path / "label_2"


def test_kitti_rows_convert_exactly_with_truncation_occlusion_and_dontcare_for_every_category(tmp_path):
    labels = load_labels(
        _kitti(
            tmp_path,
            {
                "000000": [f"Car 0.25 1 -1.5 10.5 20.25 60.75 80.0 {TAIL}", f"DontCare -1 -1 -10 100.0 10.0 150.0 40.0 {TAIL}"],
                "000001": [f"Pedestrian 0.00 2 0.3 5.00 6.00 25.00 90.00 {TAIL} 0.97", f"Traffic_cone 0 0 0 1 1 3 4 {TAIL}"],
            },
        )
    )
    assert labels.format == "kitti" and [(i.id, i.path.name, i.width, i.height) for i in labels.images] == [
        (1, "000000.png", 200, 100),
        (2, "000001.png", 200, 100),
    ]
    assert labels.categories == {
        1: "Car",
        2: "Van",
        3: "Truck",
        4: "Pedestrian",
        5: "Person_sitting",
        6: "Cyclist",
        7: "Tram",
        8: "Misc",
        9: "Traffic_cone",
    }
    car, *dontcare = [a for a in labels.annotations if a["image_id"] == 1]
    assert car == {
        "id": 1, "image_id": 1, "category_id": 1, "bbox": [10.5, 20.25, 50.25, 59.75], "area": 50.25 * 59.75, "iscrowd": 0,
        "truncated": 0.25, "occluded": 1,
    }  # fmt: skip
    assert sorted(a["category_id"] for a in dontcare) == list(range(1, 10))
    assert all(a["iscrowd"] == 1 and a["bbox"] == [100.0, 10.0, 50.0, 30.0] for a in dontcare)
    assert (labels.labels, labels.regions) == (3, 1)
    assert labels.notes == ["1 DontCare area(s): each ignores the detections of every class inside it"]


def test_kitti_dontcare_ignores_detections_of_any_class_inside_it(tmp_path):
    rows = {"000000": [f"Car 0 0 0 10 10 60 50 {TAIL}", f"Pedestrian 0 0 0 160 20 180 80 {TAIL}", f"DontCare -1 -1 -10 70 10 150 90 {TAIL}"]}
    labels = load_labels(_kitti(tmp_path, rows))
    found = [
        {"image_id": 1, "category_id": 1, "bbox": [10, 10, 50, 40], "score": 0.8},  # the car
        {"image_id": 1, "category_id": 4, "bbox": [160, 20, 20, 60], "score": 0.7},  # the pedestrian
        {"image_id": 1, "category_id": 1, "bbox": [80, 20, 40, 30], "score": 0.95},  # a car inside DontCare, scored highest
        {"image_id": 1, "category_id": 4, "bbox": [100, 30, 20, 50], "score": 0.9},  # a pedestrian inside DontCare
    ]
    assert metrics.evaluate(labels.ground_truth(), found, [1, 4], [1], draws=0).stats["map50_95"] == pytest.approx(1.0)
    # Without the DontCare row both are false positives ranked above their class's hit:
    (tmp_path / "label_2" / "000000.txt").write_text("".join(f"{line}\n" for line in rows["000000"][:2]))
    without = metrics.evaluate(load_labels(tmp_path / "label_2").ground_truth(), found, [1, 4], [1], draws=0).stats["map50_95"]
    assert without == pytest.approx(0.5)  # one false positive above one hit: precision 1/2 at every recall


@pytest.mark.parametrize(
    ("row", "message"),
    [
        (f"Car 0 5 0 10 10 60 50 {TAIL}", "000000.txt:1: occluded 5; allowed: 0, 1, 2 or 3 (-1 only for DontCare)"),
        (f"Car 1.5 0 0 10 10 60 50 {TAIL}", "000000.txt:1: truncated 1.5; allowed: 0 to 1 (-1 only for DontCare)"),
        ("Car 0 0 0 10 10 60 50", "000000.txt:1: 8 fields; allowed: 15 (16 with a score)"),
        (f"Car 0 0 0 60 10 10 50 {TAIL}", "000000.txt:1: box [60, 10, -50, 40] has width or height -50; allowed: above 0"),
        (f"Car 0 0 0 10 10 260 50 {TAIL}", "000000.txt:1: box [10, 10, 250, 40] leaves the 200x100 image; allowed: inside it"),
        (f"Car 0 x 0 10 10 60 50 {TAIL}", "000000.txt:1: truncated '0', occluded 'x', box '10 10 60 50' are not numbers"),
        (f"3Car 0 0 0 10 10 60 50 {TAIL}", "000000.txt:1: type '3Car'; allowed: a name such as Car, Van, Truck or DontCare"),
    ],
)
def test_a_bad_kitti_row_is_one_error_naming_file_line_and_value(tmp_path, row, message):
    folder = _kitti(tmp_path, {"000000": [row]})
    with pytest.raises(ConfigError) as caught:
        load_labels(folder)
    assert caught.value.message == f"{folder}/{message}" and caught.value.hint


def test_a_kitti_label_without_its_image_is_named(tmp_path):
    folder = _kitti(tmp_path, {"000000": [], "000001": []})
    (tmp_path / "image_2" / "000001.png").unlink()
    with pytest.raises(ConfigError) as caught:
        load_labels(folder)
    assert caught.value.message == f"{folder}: 1 of 2 label files have no image in {tmp_path / 'image_2'}, e.g. 000001.txt"


def _mot(tmp_path: Path, rows: list[str], frames: int = 3) -> tuple[Path, Path]:
    (tmp_path / "seq" / "gt").mkdir(parents=True)
    video = tmp_path / "seq" / "seq.avi"
    writer = cv2.VideoWriter(str(video), cv2.VideoWriter_fourcc(*"MJPG"), 10, (64, 48))
    for n in range(frames):
        writer.write(np.full((48, 64, 3), 40 * n, np.uint8))
    writer.release()
    (tmp_path / "seq" / "gt" / "gt.txt").write_text("".join(f"{row}\n" for row in rows))
    return tmp_path / "seq" / "gt" / "gt.txt", video


def test_mot_rows_become_frames_of_the_video_with_ignore_regions_clipping_and_visibility(tmp_path):
    gt, video = _mot(
        tmp_path,
        [
            "1,1,10.5,5,20,30,1,1,0.75",  # a pedestrian
            "1,2,50,20,30,20,1,3,1.0",  # a car, clipped to the 64 x 48 image
            "2,1,12,6,20,30,0,1,0.1",  # a pedestrian not considered (conf 0): an ignore region
            "3,7,1,1,5,5,1,8,1",  # a distractor: an ignore region of pedestrians
            "3,8,2,2,6,6,1,9,1",  # an occluder: no object
            "3,9,-40,1,10,10,1,1,1",  # wholly outside the image
        ],
    )
    labels = load_labels(gt, video)
    assert labels.format == "mot" and [(i.id, i.name, i.width, i.height, i.frame) for i in labels.images] == [
        (1, "seq.avi#1", 64, 48, 0), (2, "seq.avi#2", 64, 48, 1), (3, "seq.avi#3", 64, 48, 2),
    ]  # fmt: skip
    assert [(a["image_id"], a["category_id"], a["bbox"], a["iscrowd"], a.get("visibility")) for a in labels.annotations] == [
        (1, 1, [10.5, 5.0, 20.0, 30.0], 0, 0.75),
        (1, 3, [50.0, 20.0, 14.0, 20.0], 0, 1.0),
        (2, 1, [12.0, 6.0, 20.0, 30.0], 1, 0.1),
        (3, 1, [1.0, 1.0, 5.0, 5.0], 1, 1.0),
    ]
    assert labels.notes == ["2 label(s) ran past the 64x48 image and were clipped to it (or left out when wholly outside)"]
    assert labels.categories[1] == "pedestrian" and (labels.labels, labels.regions) == (2, 2)


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("1,1,10,5,20,30,1,14,1", "gt.txt:1: class 14; allowed: 1 to 13 (MOTChallenge's classes), or -1 (MOT15)"),
        ("4,1,10,5,20,30,1,1,1", "gt.txt: labels for frame 4, but seq.avi has 3 frames; allowed: frames 1 to 3"),
        ("1,1,10,5,20,30,1,1", "gt.txt:1: 8 fields; allowed: 9 (MOT16-20) or 10 (MOT15)"),
        ("0,1,10,5,20,30,1,1,1", "gt.txt:1: frame 0; allowed: 1 or more (MOTChallenge counts frames from 1)"),
        ("1,1,10,5,0,30,1,1,1", "gt.txt:1: box width 0, height 30; allowed: above 0"),
        ("1,1,10,5,20,30,1,1,1.5", "gt.txt:1: visibility 1.5; allowed: 0 to 1"),
    ],
)
def test_a_bad_mot_row_is_one_error_naming_file_line_and_value(tmp_path, row, message):
    gt, video = _mot(tmp_path, [row])
    with pytest.raises(ConfigError) as caught:
        load_labels(gt, video)
    assert caught.value.message == f"{gt.parent}/{message}" and caught.value.hint


def test_mot_frames_from_the_sequences_frame_folder_by_default_sized_by_seqinfo(tmp_path):
    gt, _ = _mot(tmp_path, ["2,1,10,5,20,30,1,-1,-1,-1"])  # MOT15's row: class and visibility -1, a pedestrian
    (tmp_path / "seq" / "frames").mkdir()
    for n in (1, 2):
        cv2.imwrite(str(tmp_path / "seq" / "frames" / f"{n:06d}.jpg"), np.zeros((48, 64, 3), np.uint8))
    (tmp_path / "seq" / "seqinfo.ini").write_text("[Sequence]\nimDir=frames\nimWidth=64\nimHeight=48\n")
    labels = load_labels(gt)
    assert [(i.id, i.name, i.frame, i.width) for i in labels.images] == [(1, "000001.jpg", None, 64), (2, "000002.jpg", None, 64)]
    assert [(a["image_id"], a["category_id"], a["iscrowd"], "visibility" in a) for a in labels.annotations] == [(2, 1, 0, False)]
    (tmp_path / "seq" / "frames" / "000001.jpg").unlink()
    with pytest.raises(ConfigError) as caught:
        load_labels(gt)
    assert caught.value.message == f"{tmp_path / 'seq' / 'frames'}: frame 1 is missing (1 of 2)"
