"""YOLOX's preprocessing (`preproc` of Megvii's YOLOX: the image resized by r = min(416 / h, 416 / w) to int(w r) x int(h r)
with OpenCV's bilinear resize on 8-bit pixels, in the top-left corner of grey 114) against the SDK's with
`resize.content: floor`, on the 29 real COCO photographs of the accuracy example (sizes from 640 x 360 to 640 x 640).

With the content size rounded to the nearest pixel (the default, Ultralytics' LetterBox), 10 of the 29 images get a
content one pixel larger than YOLOX's and their tensors differ by up to 225 grey levels along that edge; with `floor`
every content size is YOLOX's and the pixels differ only by OpenCV's 8-bit rounding of its bilinear resize (< 1 level)."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from sdk.preprocess import CpuPreprocessor
from sdk.spec.schema import Preprocess
from tests.conftest import REPO
from tests.integration.yolox_reference import preprocess as yolox_preproc

IMAGES = sorted((REPO / "pipelines" / "assets" / "coco_cc_by" / "images").glob("*.jpg"))


def _sdk(content: str) -> tuple[CpuPreprocessor, np.ndarray]:
    resize = {"width": 416, "height": 416, "mode": "letterbox", "align": "top_left", "pad_value": 114, "content": content}
    tensor = np.zeros((1, 3, 416, 416), np.float32)
    return CpuPreprocessor(Preprocess.model_validate({"resize": resize, "color": "bgr", "normalize": {"scale": 1.0}}), tensor), tensor


@pytest.mark.parametrize("sampler", ["warp", "separable"])
def test_floor_gives_yoloxs_content_size_and_its_pixels_within_8_bit_rounding(sampler):
    assert len(IMAGES) == 29
    stage, tensor = _sdk("floor")
    stage = CpuPreprocessor(stage.spec, tensor, sampler=sampler)
    worst = 0.0
    for path in IMAGES:
        image = cv2.imread(str(path))
        geometry = stage(image)
        theirs, r = yolox_preproc(image, (416, 416))
        assert (geometry.content_width, geometry.content_height) == (int(image.shape[1] * r), int(image.shape[0] * r)), path.name
        worst = max(worst, float(np.abs(tensor - theirs).max()))
    assert worst < 1.0  # measured 0.79: OpenCV's fixed-point weights and rounding to 8 bits, against exact float sampling


def test_rounding_the_content_size_misses_yoloxs_on_a_third_of_the_images():
    stage, _ = _sdk("round")
    sizes = []
    for path in IMAGES:
        image = cv2.imread(str(path))
        geometry = stage(image)
        r = min(416 / image.shape[0], 416 / image.shape[1])
        sizes.append((geometry.content_width, geometry.content_height) != (int(image.shape[1] * r), int(image.shape[0] * r)))
    assert sum(sizes) == 10
