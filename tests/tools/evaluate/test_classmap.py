"""The class map: COCO's 80 model classes land on COCO's category ids by name, every one of them; user maps, the
Darknet/VOC spellings, and a class without a category as one error with a hint."""

from __future__ import annotations

import json

import pytest

from sdk.errors import ConfigError
from tests.conftest import asset
from tools.evaluate.classmap import map_classes
from tools.models.family_decoders import COCO_CLASSES

# COCO's category id of each of the 80 classes in the order YOLOX and Ultralytics number them (the published
# "coco80 to coco91" table: ids 12, 26, 29, 30, 45, 66, 68, 69, 71, 83 are unused by the detection task).
COCO91 = (
    1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 27, 28, 31, 32, 33, 34, 35, 36, 37, 38, 39,
    40, 41, 42, 43, 44, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63, 64, 65, 67, 70, 72, 73, 74, 75, 76, 77,
    78, 79, 80, 81, 82, 84, 85, 86, 87, 88, 89, 90,
)  # fmt: skip


@pytest.fixture(scope="module")
def coco_categories() -> dict[int, str]:
    data = json.loads(asset("coco_cc_by/instances.json").read_text())
    return {c["id"]: c["name"] for c in data["categories"]}


def test_every_one_of_cocos_80_classes_lands_on_its_category_id(coco_categories):
    mapping = map_classes(COCO_CLASSES, coco_categories, {}, "p.yaml")
    assert len(COCO_CLASSES) == 80 and len(COCO91) == 80
    assert [mapping.to_category[i] for i in range(80)] == list(COCO91)
    assert mapping.left_out == () and mapping.unscored == ()


def test_darknet_names_and_other_spellings_find_cocos_categories(coco_categories):
    darknet = ["motorbike" if c == "motorcycle" else "aeroplane" if c == "airplane" else "sofa" if c == "couch" else c for c in COCO_CLASSES]
    darknet = ["tvmonitor" if c == "tv" else "diningtable" if c == "dining table" else "Potted_Plant" if c == "potted plant" else c for c in darknet]
    assert [map_classes(tuple(darknet), coco_categories, {}, "p.yaml").to_category[i] for i in range(80)] == list(COCO91)


def test_a_user_map_renames_and_null_leaves_a_class_out():
    mapping = map_classes(("pedestrian", "car", "ego"), {1: "person", 3: "car", 7: "truck"}, {"pedestrian": "person", "ego": None}, "p.yaml")
    assert mapping.to_category == {0: 1, 1: 3}
    assert mapping.left_out == ("ego",) and mapping.unscored == ("truck",)


def test_a_class_without_a_category_is_one_error_naming_it_with_the_fix():
    with pytest.raises(ConfigError) as caught:
        map_classes(("person", "cyclist"), {1: "person", 2: "bicycle"}, {}, "p.yaml")
    assert caught.value.message == "p.yaml: model class 'cyclist' has no category in the labels"
    assert "evaluation: {classes: {CLASS: CATEGORY}}" in caught.value.hint and "null" in caught.value.hint


def test_a_map_key_that_is_no_class_of_the_model_is_refused_with_the_close_name():
    with pytest.raises(ConfigError) as caught:
        map_classes(("person", "car"), {1: "person", 3: "car"}, {"persn": "person"}, "p.yaml")
    assert "evaluation.classes: 'persn' is not a class of the model" in caught.value.message
    assert caught.value.hint == "did you mean 'person'?"


def test_a_map_value_that_is_no_category_of_the_labels_is_refused_with_the_close_name():
    with pytest.raises(ConfigError) as caught:
        map_classes(("pedestrian",), {1: "person"}, {"pedestrian": "persons"}, "p.yaml")
    assert "'pedestrian' maps to 'persons', which is not a category of the labels" in caught.value.message
    assert caught.value.hint == "did you mean 'person'?"
