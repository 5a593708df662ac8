"""Labels in: COCO JSON with its image folder and Ultralytics YOLO datasets, read into one form; YOLO's normalised
rows converted exactly; bad labels refused in one error naming the file, the entry and what is allowed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import cv2
import numpy as np
import pytest

from sdk.errors import ConfigError
from tools.evaluate.labels import load_labels


def _image(path: Path, width: int = 64, height: int = 48) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    cv2.imwrite(str(path), np.full((height, width, 3), 90, np.uint8))
    return path


def _coco(tmp_path: Path, annotations: list[dict], *, images: int = 1) -> Path:
    for i in range(images):
        _image(tmp_path / "images" / f"{i + 1}.png")
    data = {
        "images": [{"id": i + 1, "file_name": f"{i + 1}.png", "width": 64, "height": 48} for i in range(images)],
        "categories": [{"id": 1, "name": "person"}, {"id": 3, "name": "car"}],
        "annotations": annotations,
    }
    (tmp_path / "labels.json").write_text(json.dumps(data))
    return tmp_path / "labels.json"


def _yolo(tmp_path: Path, rows: str, names=("person", "car")) -> Path:
    _image(tmp_path / "data" / "images" / "val" / "a.png", 200, 100)
    (tmp_path / "data" / "labels" / "val").mkdir(parents=True)
    (tmp_path / "data" / "labels" / "val" / "a.txt").write_text(rows)
    (tmp_path / "data.yaml").write_text(f"path: data\nval: images/val\nnames: {list(names)}\n")
    return tmp_path / "data.yaml"


def test_coco_labels_are_read_with_their_image_folder_and_crowd_regions(tmp_path):
    path = _coco(tmp_path, [{"id": 7, "image_id": 1, "category_id": 3, "bbox": [1, 2, 30, 20], "area": 500.0, "iscrowd": 1}])
    labels = load_labels(path)
    assert [(i.id, i.path, i.width, i.height) for i in labels.images] == [(1, tmp_path / "images" / "1.png", 64, 48)]
    assert labels.categories == {1: "person", 3: "car"} and labels.format == "coco"
    assert labels.annotations == [{"id": 7, "image_id": 1, "category_id": 3, "bbox": [1.0, 2.0, 30.0, 20.0], "area": 500.0, "iscrowd": 1}]


def test_yolo_rows_are_converted_to_pixels_exactly(tmp_path):
    labels = load_labels(_yolo(tmp_path, "1 0.5 0.25 0.2 0.3\n\n0 0.125 0.5 0.25 1.0\n"))
    assert labels.format == "yolo" and labels.categories == {0: "person", 1: "car"}
    assert [(a["category_id"], a["bbox"], a["iscrowd"]) for a in labels.annotations] == [
        (1, [(0.5 - 0.1) * 200, (0.25 - 0.15) * 100, 0.2 * 200, 0.3 * 100], 0),
        (0, [0.0, 0.0, 50.0, 100.0], 0),
    ]
    assert labels.annotations[0]["bbox"] == pytest.approx([80.0, 10.0, 40.0, 30.0], abs=1e-12)


def test_a_yolo_image_without_a_label_file_has_no_objects(tmp_path):
    path = _yolo(tmp_path, "0 0.5 0.5 0.1 0.1\n")
    _image(tmp_path / "data" / "images" / "val" / "b.png")
    labels = load_labels(path)
    assert [i.path.name for i in labels.images] == ["a.png", "b.png"] and len(labels.annotations) == 1


@pytest.mark.parametrize(
    ("annotation", "message"),
    [
        (
            {"image_id": 1, "category_id": 1, "bbox": [5, 5, -3, 10]},
            "annotations[0] (1.png): box [5, 5, -3, 10] has width or height -3; allowed: above 0",
        ),
        (
            {"image_id": 1, "category_id": 1, "bbox": [40, 5, 60, 10]},
            "annotations[0] (1.png): box [40, 5, 60, 10] leaves the 64x48 image; allowed: inside it",
        ),
        ({"image_id": 9, "category_id": 1, "bbox": [1, 1, 2, 2]}, "annotations[0]: image_id 9 is not in `images`"),
        ({"image_id": 1, "category_id": 2, "bbox": [1, 1, 2, 2]}, "annotations[0]: category_id 2 is not in `categories`"),
    ],
)
def test_a_bad_coco_box_is_one_error_naming_the_entry(tmp_path, annotation, message):
    with pytest.raises(ConfigError) as caught:
        load_labels(_coco(tmp_path, [annotation]))
    assert caught.value.message == f"{tmp_path / 'labels.json'}: {message}"
    assert caught.value.hint


def test_labels_naming_missing_images_say_how_many_and_which(tmp_path):
    path = _coco(tmp_path, [], images=3)
    (tmp_path / "images" / "2.png").unlink()
    with pytest.raises(ConfigError) as caught:
        load_labels(path)
    assert caught.value.message == f"{path}: 1 of 3 labelled images are not in {tmp_path / 'images'}, e.g. 2.png"
    assert "--images" in caught.value.hint


def test_corrupt_json_and_an_empty_set_are_refused(tmp_path):
    path = _coco(tmp_path, [])
    path.write_text('{"images": [}')
    with pytest.raises(ConfigError, match=r"labels.json: not valid JSON: Expecting value at line 1, column 13"):
        load_labels(path)
    path.write_text(json.dumps({"images": [], "annotations": [], "categories": [{"id": 1, "name": "person"}]}))
    with pytest.raises(ConfigError, match="the label set holds no images"):
        load_labels(path)
    path.write_text(json.dumps({"images": []}))
    with pytest.raises(ConfigError, match="not a COCO detection file; allowed: an object with the lists `images`, `annotations` and `categories`"):
        load_labels(path)


def test_a_yolo_class_index_out_of_range_names_the_file_line_and_range(tmp_path):
    path = _yolo(tmp_path, "0 0.5 0.5 0.1 0.1\n2 0.5 0.5 0.1 0.1\n")
    with pytest.raises(ConfigError) as caught:
        load_labels(path)
    label = tmp_path / "data" / "labels" / "val" / "a.txt"
    assert caught.value.message == f"{label}:2: class index 2 is out of range; allowed: 0 to 1 (`names` in data.yaml)"


def test_a_yolo_box_with_negative_size_or_a_bad_row_is_refused(tmp_path):
    path = _yolo(tmp_path, "0 0.5 0.5 -0.1 0.1\n")
    with pytest.raises(ConfigError, match=r"a.txt:1: box .* has width or height -20; allowed: above 0"):
        load_labels(path)
    shutil.rmtree(tmp_path / "data")
    path = _yolo(tmp_path, "0 0.5 0.5 0.1\n")
    with pytest.raises(ConfigError, match=r"a.txt:1: '0 0.5 0.5 0.1' has 4 fields; allowed: class cx cy w h"):
        load_labels(path)
