"""What a launch needs, decided in Python: launch geometry, buffer sizes, the parameter block, kernel names."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from sdk.errors import ConfigError
from sdk.gpu.params import PpParams, field_offsets, kernel_arguments
from sdk.gpu.plan import BLOCK_THREADS, KERNEL_NAMES, PreprocessPlan, launch_geometry, source_layout
from sdk.preprocess import ResizeGeometry
from sdk.spec.schema import Preprocess, Resize


@pytest.mark.parametrize("size", [(1, 1), (31, 7), (32, 8), (33, 9), (300, 300), (640, 384), (1920, 1080), (16384, 3)])
def test_launch_covers_every_output_pixel_with_the_fewest_blocks(size):
    width, height = size
    (gx, gy, gz), (bx, by, bz) = launch_geometry(width, height)
    assert bx * by * bz <= BLOCK_THREADS and bx % 32 == 0 and gz == bz == 1
    assert gx * bx >= width and gy * by >= height  # every pixel has a thread
    assert (gx - 1) * bx < width and (gy - 1) * by < height  # no block is wholly idle


def test_launch_geometry_refuses_what_cuda_cannot_launch():
    with pytest.raises(ValueError):
        launch_geometry(10, 10, block=(32, 16, 1))  # 512 threads > __launch_bounds__(256)
    with pytest.raises(ValueError):
        launch_geometry(10, 10, block=(16, 16, 1))  # half warps along x
    with pytest.raises(ConfigError, match="65535"):
        launch_geometry(4, 8 * 65535 + 1)


@pytest.mark.parametrize(
    ("source_format", "size", "expected"),
    [
        ("bgr8", (768, 576), (2304, 2304 * 576, 0, 0)),
        ("rgb8", (1, 1), (3, 3, 0, 0)),
        ("nv12", (1920, 1080), (1920, 1920 * 1080, 1920, 1920 * 540)),
        ("nv12", (1919, 1079), (1919, 1919 * 1079, 1920, 1920 * 540)),  # the last odd column/row has chroma too
        ("yuyv", (640, 480), (1280, 1280 * 480, 0, 0)),
        ("yuyv", (7, 3), (16, 48, 0, 0)),  # a half-filled last macropixel
    ],
)
def test_source_buffer_sizes(source_format, size, expected):
    assert source_layout(source_format, *size) == expected


def test_pitches_are_checked():
    assert source_layout("bgr8", 10, 2, pitch=64) == (64, 128, 0, 0)
    assert source_layout("nv12", 10, 4, pitch=16, uv_pitch=32) == (16, 64, 32, 64)
    with pytest.raises(ConfigError, match="at least 30"):
        source_layout("bgr8", 10, 2, pitch=29)
    with pytest.raises(ConfigError, match="chroma"):
        source_layout("nv12", 10, 2, uv_pitch=8)
    with pytest.raises(ConfigError, match="unknown source pixel format"):
        source_layout("mjpeg", 10, 2)


@pytest.mark.parametrize("dtype", ["float32", "float16", "uint8"])
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("color", ["rgb", "gray"])
def test_output_shape_bytes_and_kernel_name(dtype, layout, color):
    spec = Preprocess(resize={"width": 300, "height": 200}, dtype=dtype, layout=layout, color=color)
    plan = PreprocessPlan.build(spec, "nv12", 1920, 1080)
    assert plan.output_shape == spec.tensor_shape
    assert plan.output_bytes == np.zeros(spec.tensor_shape, dtype).nbytes
    assert plan.numpy_dtype == np.dtype(dtype)
    assert plan.kernel in KERNEL_NAMES and plan.kernel == f"pp_nv12_{ {'float32': 'f32', 'float16': 'f16', 'uint8': 'u8'}[dtype]}_{layout}"
    assert plan.params.channels == (1 if color == "gray" else 3)


def test_the_parameter_block_carries_the_geometry_and_normalisation():
    spec = Preprocess(
        resize={"width": 640, "height": 640, "mode": "letterbox", "coordinates": "asymmetric", "pad_value": 0},
        crop={"x": 10, "y": 20, "width": 700, "height": 500},
        color="rgb",
        normalize={"scale": 1 / 255, "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]},
    )
    plan = PreprocessPlan.build(spec, "bgr8", 768, 576)
    g = ResizeGeometry.plan(768, 576, Resize(**spec.resize.model_dump()), spec.crop)
    p = plan.params
    assert (p.crop_x, p.crop_y, p.crop_w, p.crop_h) == (g.crop_x, g.crop_y, g.crop_width, g.crop_height) == (10, 20, 700, 500)
    assert (p.pad_x, p.pad_y, p.content_w, p.content_h, p.out_w, p.out_h) == (0, 91, 640, 457, 640, 640)
    assert np.allclose([p.ax, p.bx, p.ay, p.by], g.sampling(), rtol=1e-7)
    assert list(p.pick) == [2, 1, 0] and p.pad_value == 0.0
    for c, (mean, std) in enumerate(zip(spec.normalize.mean, spec.normalize.std, strict=True)):
        assert p.gain[c] == np.float32(1 / 255 / std) and p.offset[c] == np.float32(-mean / std)


def test_int8_output_needs_float32_and_a_positive_scale():
    spec = Preprocess(resize={"width": 8, "height": 8})
    plan = PreprocessPlan.build(spec, "bgr8", 16, 16, int8_scale=0.02)
    assert plan.kernel == "pp_bgr8_i8_nchw" and plan.numpy_dtype == np.int8 and plan.output_bytes == 3 * 64
    assert plan.params.quant_scale == np.float32(0.02)
    with pytest.raises(ConfigError):
        PreprocessPlan.build(spec, "bgr8", 16, 16, int8_scale=0.0)
    with pytest.raises(ConfigError):
        PreprocessPlan.build(Preprocess(resize={"width": 8, "height": 8}, dtype="float16"), "bgr8", 16, 16, int8_scale=0.1)


def test_binding_addresses_copies_the_block():
    plan = PreprocessPlan.build(Preprocess(resize={"width": 8, "height": 8}), "nv12", 16, 16)
    bound = plan.bound(0x1000, 0x3000, 0x2000)
    assert (bound.src, bound.src_uv, bound.dst) == (0x1000, 0x2000, 0x3000)
    assert plan.params.src == 0 and bound.out_w == 8  # the plan itself is untouched
    with pytest.raises(ConfigError, match="chroma"):
        plan.bound(0x1000, 0x3000)


def test_kernel_arguments_point_at_the_parameter_block():
    params = PpParams(out_w=640, out_h=480, quant_scale=0.5)
    pointers, address = kernel_arguments(params)
    first = ctypes.cast(address, ctypes.POINTER(ctypes.c_void_p))[0]
    assert first == ctypes.addressof(params)
    seen = PpParams.from_address(first)
    assert (seen.out_w, seen.out_h, seen.quant_scale) == (640, 480, 0.5)


def test_parameter_block_has_no_padding():
    offsets = field_offsets()
    assert offsets[0] == 160  # 3 addresses, 12 ints, 12 floats, 4 ints, 6 YUV ints: what pp_params.h declares
    sizes = [ctypes.sizeof(t) for _, t in PpParams._fields_]
    assert all(offsets[i + 2] == offsets[i + 1] + sizes[i] for i in range(len(sizes) - 1))


def test_minimum_bytes_read_the_crop_once_and_write_the_output_once():
    spec = Preprocess(resize={"width": 300, "height": 300})
    assert PreprocessPlan.build(spec, "bgr8", 768, 576).minimum_bytes() == 768 * 576 * 3 + 300 * 300 * 3 * 4
    assert PreprocessPlan.build(spec, "nv12", 1920, 1080).minimum_bytes() == 1920 * 1080 * 3 // 2 + 300 * 300 * 3 * 4
    assert PreprocessPlan.build(spec, "yuyv", 640, 480).minimum_bytes() == 640 * 480 * 2 + 300 * 300 * 3 * 4
    cropped = Preprocess(resize={"width": 300, "height": 300}, crop={"x": 0, "y": 0, "width": 100, "height": 50}, dtype="uint8")
    assert PreprocessPlan.build(cropped, "bgr8", 768, 576).minimum_bytes() == 100 * 50 * 3 + 300 * 300 * 3
