"""CPU preprocessing against independent references: ONNX Runtime's Resize for every coordinate mode,
and the detector graph's own TensorFlow preprocessing on real frames."""

from __future__ import annotations

import cv2
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from sdk.errors import ConfigError
from sdk.preprocess import CpuPreprocessor, ResizeGeometry
from sdk.spec.schema import Preprocess

LSB = 1.0  # one step of 8-bit input, in pixel units
EXACT = 0.05 * LSB  # sampling at the exact position (measured <= 0.016); OpenCV 4's 1/32-pixel grid is ~4 steps off at edges
# "auto" is OpenCV's warp where it samples exactly (OpenCV 5), "separable" the sampler used elsewhere: both run here.
SAMPLERS = pytest.mark.parametrize("sampler", ["auto", "separable"])


def onnx_resize(image_hwc: np.ndarray, out_h: int, out_w: int, mode: str) -> np.ndarray:
    """ONNX Runtime's bilinear Resize (float, exact weights) as the reference sampler."""
    graph = helper.make_graph(
        [helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode="linear", coordinate_transformation_mode=mode)],
        "resize",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("sizes", TensorProto.INT64, [4]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=10)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    x = image_hwc.astype(np.float32).transpose(2, 0, 1)[None]
    (y,) = session.run(None, {"x": x, "sizes": np.array([1, x.shape[1], out_h, out_w], np.int64)})
    return y[0].transpose(1, 2, 0)


def make(resize: dict, sampler: str = "auto", **kwargs) -> tuple[Preprocess, np.ndarray, CpuPreprocessor]:
    spec = Preprocess(resize=resize, **kwargs)
    output = np.zeros(spec.tensor_shape, spec.dtype)
    return spec, output, CpuPreprocessor(spec, output, sampler=sampler)


def raw(resize: dict, image: np.ndarray, sampler: str = "auto", **kwargs) -> np.ndarray:
    """Resized pixels (BGR, HWC, float) from the preprocessor with identity normalisation."""
    spec, output, pre = make(resize, sampler, color="bgr", layout="nhwc", **kwargs)
    pre(image)
    return output[0].astype(np.float32)


@pytest.fixture(scope="module")
def frames(video_path):
    capture = cv2.VideoCapture(str(video_path))
    images = []
    for index in range(120):
        ok, image = capture.read()
        if index in (0, 60, 119):
            images.append(image.copy())
    capture.release()
    return images


@SAMPLERS
@pytest.mark.parametrize("mode", ["half_pixel", "asymmetric", "align_corners"])
@pytest.mark.parametrize("size", [(300, 300), (640, 384), (97, 61), (1, 1)])
def test_stretch_matches_onnx_resize_on_real_frames(frames, mode, size, sampler):
    width, height = size
    for image in frames:
        ours = raw({"width": width, "height": height, "coordinates": mode}, image, sampler)
        reference = onnx_resize(image, height, width, mode)
        assert np.abs(ours - reference).max() <= EXACT


@SAMPLERS
@pytest.mark.parametrize("mode", ["half_pixel", "asymmetric", "align_corners"])
@pytest.mark.parametrize("source", [(1, 1), (1919, 1079), (1000, 3), (3, 1000), (2, 2)])
def test_odd_source_sizes(mode, source, sampler):
    width, height = source
    y, x = np.mgrid[0:height, 0:width]
    smooth = np.stack([(x * 255 // max(1, width - 1)), (y * 255 // max(1, height - 1)), (x + y) % 256], axis=2).astype(np.uint8)
    for out in ((300, 300), (64, 17)):
        ours = raw({"width": out[0], "height": out[1], "coordinates": mode}, smooth, sampler)
        reference = onnx_resize(smooth, out[1], out[0], mode)
        assert np.abs(ours - reference).max() <= EXACT


@SAMPLERS
def test_noise_is_sampled_at_the_exact_positions(sampler):
    """Worst case for a rounded sampling grid (OpenCV 4's 1/32 pixel: up to 4 steps): neighbours differing by up to 255."""
    image = np.random.default_rng(7).integers(0, 256, (240, 320, 3), dtype=np.uint8)
    ours = raw({"width": 300, "height": 300, "coordinates": "asymmetric"}, image, sampler)
    reference = onnx_resize(image, 300, 300, "asymmetric")
    assert np.abs(ours - reference).max() <= EXACT


@SAMPLERS
def test_matches_the_detector_graphs_own_preprocessing(detector_path, frames, sampler):
    """The asymmetric grid reproduces TF's legacy resize and x * 2/255 - 1, NCHW, to an eighth of an 8-bit step."""
    model = onnx.load(str(detector_path))
    model.graph.output.append(helper.make_tensor_value_info("Preprocessor/sub:0", TensorProto.FLOAT, None))
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    spec, output, pre = make(
        {"width": 300, "height": 300, "coordinates": "asymmetric"},
        sampler,
        color="rgb",
        normalize={"scale": 1 / 255, "mean": [0.5] * 3, "std": [0.5] * 3},
    )
    for image in frames:
        reference = session.run(None, {"image_tensor:0": cv2.cvtColor(image, cv2.COLOR_BGR2RGB)[None]})[-1]
        pre(image)
        assert np.abs(output - reference).max() <= 1e-3  # 1.2e-4 measured (float32 rounding of TF's own resize)


@SAMPLERS
def test_letterbox_places_the_image_and_pads(frames, sampler):
    image = frames[0]  # 768 x 576 -> 640 x 640: scale 5/6, content 640 x 480, 80 rows of pad above and below
    spec, output, pre = make({"width": 640, "height": 640, "mode": "letterbox", "pad_value": 114}, sampler, color="bgr", layout="nhwc", dtype="uint8")
    geometry = pre(image)
    assert (geometry.pad_x, geometry.pad_y, geometry.content_width, geometry.content_height) == (0, 80, 640, 480)
    assert (output[0, :80] == 114).all() and (output[0, 560:] == 114).all()
    content = output[0, 80:560].astype(np.float32)
    assert np.abs(content - onnx_resize(image, 480, 640, "half_pixel")).max() <= 0.5 + EXACT  # rounded to uint8


@SAMPLERS
def test_crop_then_resize(frames, sampler):
    image = frames[1]
    ours = raw({"width": 100, "height": 50}, image, sampler, crop={"x": 100, "y": 200, "width": 400, "height": 200})
    reference = onnx_resize(image[200:400, 100:500], 50, 100, "half_pixel")
    assert np.abs(ours - reference).max() <= EXACT


def test_colour_layout_dtype_and_normalisation_agree(frames):
    image = frames[2]
    resize = {"width": 64, "height": 48}
    normalize = {"scale": 1 / 255, "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}
    _, nchw_rgb, pre = make(resize, color="rgb", normalize=normalize)
    pre(image)
    _, nhwc_rgb, pre = make(resize, color="rgb", normalize=normalize, layout="nhwc")
    pre(image)
    _, nchw_half, pre = make(resize, color="rgb", normalize=normalize, dtype="float16")
    pre(image)
    bgr = raw(resize, image)
    expected = (bgr[:, :, ::-1] / 255 - np.array(normalize["mean"])) / np.array(normalize["std"])
    assert np.allclose(nhwc_rgb[0], expected, atol=1e-5)
    assert np.allclose(nchw_rgb[0].transpose(1, 2, 0), expected, atol=1e-5)
    assert nchw_half.dtype == np.float16 and np.allclose(nchw_half.astype(np.float32), nchw_rgb, atol=2e-3)
    _, gray, pre = make(resize, color="gray", dtype="uint8")
    pre(image)
    assert gray.shape == (1, 1, 48, 64)
    expected_gray = cv2.cvtColor(bgr.round().astype(np.uint8), cv2.COLOR_BGR2GRAY)
    assert np.abs(gray[0, 0].astype(int) - expected_gray.astype(int)).max() <= 1


def test_output_buffer_is_written_in_place(frames):
    _, output, pre = make({"width": 32, "height": 32})
    address = output.__array_interface__["data"][0]
    pre(frames[0])
    first = output.copy()
    pre(frames[1])
    assert output.__array_interface__["data"][0] == address
    assert not np.array_equal(first, output)


def test_mismatched_model_input_is_refused():
    spec = Preprocess(resize={"width": 32, "height": 32})
    with pytest.raises(ConfigError, match=r"\[1, 3, 32, 32\] float32 but the model input is \[1, 3, 64, 64\]"):
        CpuPreprocessor(spec, np.zeros((1, 3, 64, 64), np.float32))


def test_gray_source_frames_are_accepted():
    gray = np.tile(np.arange(64, dtype=np.uint8), (48, 1))
    ours = raw({"width": 32, "height": 24}, gray)
    assert ours.shape == (24, 32, 3) and np.allclose(ours[:, :, 0], ours[:, :, 2])


def test_box_mapping_is_the_inverse_of_the_geometry():
    resize = Preprocess(resize={"width": 640, "height": 640, "mode": "letterbox"}).resize
    geometry = ResizeGeometry.plan(1280, 720, resize)  # scale 0.5, content 640 x 360, pad_y 140
    boxes = np.array([[0, 140, 640, 500], [320, 320, 330, 330]], np.float32)
    geometry.boxes_to_source(boxes)
    assert np.allclose(boxes, [[0, 0, 1280, 720], [640, 360, 660, 380]])
    cropped = ResizeGeometry.plan(1000, 1000, Preprocess(resize={"width": 100, "height": 100}).resize, crop=_crop(200, 100, 400, 200))
    boxes = np.array([[0, 0, 100, 100]], np.float32)
    cropped.boxes_to_source(boxes)
    assert np.allclose(boxes, [[200, 100, 600, 300]])


def test_crop_larger_than_the_frame_is_clipped():
    geometry = ResizeGeometry.plan(100, 80, Preprocess(resize={"width": 10, "height": 10}).resize, crop=_crop(50, 40, 500, 500))
    assert (geometry.crop_x, geometry.crop_y, geometry.crop_width, geometry.crop_height) == (50, 40, 50, 40)


def _crop(x, y, w, h):
    from sdk.spec.schema import Crop

    return Crop(x=x, y=y, width=w, height=h)
