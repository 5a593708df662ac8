"""The kernels' per-pixel code (host build of plugins_cuda/include/pp_math.cuh) against the OpenCV CPU path.

Bounds, in 8-bit steps of the input (LSB) unless said otherwise. The CPU path samples on OpenCV's
1/32-pixel grid, the kernels at the exact position, so they differ by a fraction of a step on real
frames (0.015 LSB measured on vtest.avi); a wrong coordinate mode, colour or layout differs by many.
"""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from sdk.gpu.params import field_offsets
from sdk.gpu.plan import PreprocessPlan
from sdk.preprocess import CpuPreprocessor
from sdk.spec.schema import Preprocess

from .helpers import nv12_to_bgr, to_nv12, to_yuyv, yuyv_to_bgr

IMAGENET = {"scale": 1 / 255, "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}
FLOAT_LSB = 0.25  # float outputs: at most a quarter step (measured 0.015)
QUANT = 2.64 / 127  # an INT8 input scale as calibration gives for ImageNet-normalised input (amax / 127)


def cpu(spec: Preprocess, image_bgr: np.ndarray) -> np.ndarray:
    output = np.zeros(spec.tensor_shape, spec.dtype)
    CpuPreprocessor(spec, output)(image_bgr)
    return output


def run_format(reference, spec: Preprocess, image_bgr: np.ndarray, source_format: str, int8_scale: float | None = None):
    """(kernel output, the BGR image the CPU path must see): YUV formats go through OpenCV's conversion for the CPU."""
    h, w = image_bgr.shape[:2]
    if source_format == "nv12":
        y, uv = to_nv12(image_bgr)
        plan = PreprocessPlan.build(spec, "nv12", w, h, int8_scale=int8_scale)
        return reference.run(plan, y, uv), nv12_to_bgr(y, uv)
    if source_format == "yuyv":
        packed = to_yuyv(image_bgr)
        return reference.run(PreprocessPlan.build(spec, "yuyv", w, h, int8_scale=int8_scale), packed), yuyv_to_bgr(packed)
    source = image_bgr if source_format == "bgr8" else np.ascontiguousarray(image_bgr[:, :, ::-1])
    return reference.run(PreprocessPlan.build(spec, source_format, w, h, int8_scale=int8_scale), source), image_bgr


def max_gain(spec: Preprocess) -> float:
    n = spec.normalize
    return max(abs(n.scale / s) for s in n.std)


def assert_close(ours: np.ndarray, theirs: np.ndarray, spec: Preprocess) -> float:
    """Assert the per-dtype bound; return the max difference in input steps."""
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
    diff = np.abs(ours.astype(np.float64) - theirs.astype(np.float64))
    if spec.dtype == "uint8":
        assert diff.max() <= 1  # both round a value that differs by < 1 step
        return float(diff.max())
    gain = max_gain(spec)
    bound = FLOAT_LSB * gain
    if spec.dtype == "float16":  # plus half a unit in the last place of each side's rounding
        bound = bound + np.abs(theirs.astype(np.float64)) * 2.0**-10
    assert (diff <= bound).all(), f"max diff {diff.max()} (in steps: {diff.max() / gain})"
    return float(diff.max() / gain)


def test_parameter_block_layout_is_the_compilers(reference):
    import ctypes

    out = (ctypes.c_uint * 64)()
    n = reference.lib.pp_params_layout(out, 64)
    assert list(out[:n]) == field_offsets()


def test_half_conversion_rounds_like_numpy(reference):
    rng = np.random.default_rng(3)
    values = np.concatenate(
        [
            rng.normal(0, 3, 20000).astype(np.float32),
            rng.uniform(-70000, 70000, 5000).astype(np.float32),
            (rng.uniform(-1, 1, 5000) * 2.0**-14).astype(np.float32),  # half subnormals
            np.array([0.0, -0.0, 65504, 65519.99, 65520, -65520, np.inf, -np.inf, 2.0**-25, 2.0**-24, 3 * 2.0**-25, 1 + 2.0**-11], np.float32),
        ]
    )
    ours = np.array([reference.lib.pp_half(float(v)) for v in values], np.uint16)
    with np.errstate(over="ignore"):
        assert (ours == values.astype(np.float16).view(np.uint16)).all()
    assert np.isnan(np.uint16(reference.lib.pp_half(float("nan"))).view(np.float16))


@pytest.mark.parametrize("source_format", ["nv12", "yuyv"])
def test_yuv_conversion_is_opencvs_bit_for_bit(reference, real_frames, source_format):
    """At the source size every output pixel is one source pixel: the colour conversion alone."""
    image = real_frames[0]
    h, w = image.shape[:2]
    spec = Preprocess(resize={"width": w, "height": h}, color="bgr", layout="nhwc", dtype="uint8")
    ours, converted = run_format(reference, spec, image, source_format)
    assert np.array_equal(ours[0], converted)


@pytest.mark.parametrize("mode", ["half_pixel", "asymmetric", "align_corners"])
def test_sampling_is_exact_bilinear(reference, real_frames, mode):
    """Against float64 bilinear at the geometry's own positions: only float32 rounding remains (positions
    near x = 768 carry 6e-5 pixel of rounding, times an edge of up to ~100 steps per pixel)."""
    image = real_frames[1]
    h, w = image.shape[:2]
    spec = Preprocess(resize={"width": 300, "height": 200, "coordinates": mode, "mode": "letterbox"}, color="bgr", layout="nhwc")
    plan = PreprocessPlan.build(spec, "bgr8", w, h)
    ours = reference.run(plan, image)[0]
    g = plan.geometry
    ax, bx, ay, by = g.sampling()
    sx = np.clip(ax * np.arange(g.content_width) + bx, 0, w - 1)
    sy = np.clip(ay * np.arange(g.content_height) + by, 0, h - 1)
    x0, y0 = np.floor(sx).astype(int), np.floor(sy).astype(int)
    x1, y1 = np.minimum(x0 + 1, w - 1), np.minimum(y0 + 1, h - 1)
    fx, fy = (sx - x0)[None, :, None], (sy - y0)[:, None, None]
    f = image.astype(np.float64)
    top = f[y0][:, x0] * (1 - fx) + f[y0][:, x1] * fx
    bottom = f[y1][:, x0] * (1 - fx) + f[y1][:, x1] * fx
    exact = top * (1 - fy) + bottom * fy
    content = ours[g.pad_y : g.pad_y + g.content_height, g.pad_x : g.pad_x + g.content_width]
    assert np.abs(content - exact).max() <= 0.02
    assert (ours[: g.pad_y] == 114).all() and (ours[g.pad_y + g.content_height :] == 114).all()


CASES = [
    # (format, dtype, layout, colour, resize)
    ("bgr8", "float32", "nchw", "rgb", {"width": 300, "height": 300, "coordinates": "asymmetric"}),
    ("bgr8", "float16", "nhwc", "bgr", {"width": 640, "height": 640, "mode": "letterbox"}),
    ("bgr8", "uint8", "nhwc", "rgb", {"width": 416, "height": 256, "mode": "letterbox", "coordinates": "align_corners"}),
    ("rgb8", "float32", "nhwc", "rgb", {"width": 320, "height": 192}),
    ("rgb8", "float16", "nchw", "gray", {"width": 128, "height": 96, "mode": "letterbox", "pad_value": 0}),
    ("nv12", "float32", "nchw", "rgb", {"width": 640, "height": 384, "mode": "letterbox"}),
    ("nv12", "float16", "nchw", "bgr", {"width": 300, "height": 300, "coordinates": "asymmetric"}),
    ("nv12", "uint8", "nchw", "gray", {"width": 200, "height": 100}),
    ("yuyv", "float32", "nhwc", "bgr", {"width": 512, "height": 512, "mode": "letterbox", "coordinates": "asymmetric"}),
    ("yuyv", "float16", "nchw", "rgb", {"width": 224, "height": 224}),
    ("yuyv", "uint8", "nchw", "bgr", {"width": 1024, "height": 768}),  # upscaling
]


def case_id(value) -> str:
    return "x".join(map(str, value.values())) if isinstance(value, dict) else str(value)


@pytest.mark.parametrize(("source_format", "dtype", "layout", "color", "resize"), CASES, ids=case_id)
def test_matches_the_cpu_path_on_real_frames(reference, real_frames, source_format, dtype, layout, color, resize):
    spec = Preprocess(resize=resize, color=color, layout=layout, dtype=dtype, normalize=IMAGENET if dtype != "uint8" else {})
    for image in real_frames:
        ours, seen = run_format(reference, spec, image, source_format)
        assert_close(ours, cpu(spec, seen), spec)


def test_crop_then_letterbox(reference, real_frames):
    crop = {"x": 100, "y": 50, "width": 500, "height": 300}
    spec = Preprocess(resize={"width": 256, "height": 256, "mode": "letterbox"}, crop=crop, normalize=IMAGENET)
    ours, seen = run_format(reference, spec, real_frames[0], "nv12")
    assert_close(ours, cpu(spec, seen), spec)


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("source_format", ["bgr8", "nv12"])
def test_int8_is_the_cpu_values_quantized(reference, real_frames, layout, source_format):
    """INT8 = QuantizeLinear(value, scale): round half to even, saturate; off by one step at most at a rounding edge."""
    spec = Preprocess(resize={"width": 300, "height": 300, "mode": "letterbox"}, layout=layout, normalize=IMAGENET)
    for scale in (QUANT, 0.005):  # the calibrated scale, and one that saturates most pixels
        ours, seen = run_format(reference, spec, real_frames[1], source_format, int8_scale=scale)
        expected = np.clip(np.rint(cpu(spec, seen) / np.float32(scale)), -128, 127).astype(np.int8)
        assert ours.dtype == np.int8
        diff = np.abs(ours.astype(int) - expected.astype(int))
        assert diff.max() <= 1 and (diff > 0).mean() < 0.01
    assert ours.min() == -128 and ours.max() == 127


ODD_SOURCES = [(1, 1), (1919, 1079), (1000, 3), (3, 1000), (2, 2), (7, 5)]
ODD_OUTPUTS = [{"width": 300, "height": 300}, {"width": 64, "height": 17, "mode": "letterbox"}, {"width": 1, "height": 1}]


@pytest.mark.parametrize("coordinates", ["half_pixel", "asymmetric", "align_corners"])
@pytest.mark.parametrize("source", ODD_SOURCES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_odd_sizes_every_layout_and_dtype(reference, real_frames, source, coordinates):
    """Real content squeezed to odd sizes; every output type and layout; packed input, and YUV where OpenCV can convert it."""
    width, height = source
    image = cv2.resize(real_frames[0], (width, height), interpolation=cv2.INTER_AREA)
    formats = ["rgb8"] + (["yuyv"] if width % 2 == 0 else []) + (["nv12"] if width % 2 == 0 and height % 2 == 0 else [])
    for source_format in formats:
        for resize in ODD_OUTPUTS:
            for layout in ("nchw", "nhwc"):
                for dtype in ("float32", "float16", "uint8"):
                    normalize = IMAGENET if dtype != "uint8" else {}
                    spec = Preprocess(resize={**resize, "coordinates": coordinates}, color="rgb", layout=layout, dtype=dtype, normalize=normalize)
                    ours, seen = run_format(reference, spec, image, source_format)
                    assert_close(ours, cpu(spec, seen), spec)
                spec = Preprocess(resize={**resize, "coordinates": coordinates}, layout=layout, normalize=IMAGENET)
                ours, seen = run_format(reference, spec, image, source_format, int8_scale=QUANT)
                expected = np.clip(np.rint(cpu(spec, seen) / np.float32(QUANT)), -128, 127)
                assert np.abs(ours.astype(np.float64) - expected).max() <= 1


@pytest.mark.parametrize("source_format", ["nv12", "yuyv"])
def test_odd_yuv_frame_inside_a_padded_buffer(reference, real_frames, source_format):
    """1919x1079 in a 1920x1080 camera buffer: pitch and odd chroma edges, against OpenCV's conversion of the whole buffer."""
    big = cv2.resize(real_frames[1], (1920, 1080), interpolation=cv2.INTER_LINEAR)
    spec = Preprocess(resize={"width": 640, "height": 640, "mode": "letterbox"}, normalize=IMAGENET, dtype="float16")
    if source_format == "nv12":
        y, uv = to_nv12(big)
        plan = PreprocessPlan.build(spec, "nv12", 1919, 1079, pitch=1920, uv_pitch=1920)
        ours, seen = reference.run(plan, y, uv), nv12_to_bgr(y, uv)
    else:
        packed = to_yuyv(big)
        plan = PreprocessPlan.build(spec, "yuyv", 1919, 1079, pitch=3840)
        ours, seen = reference.run(plan, packed), yuyv_to_bgr(packed)
    assert_close(ours, cpu(spec, np.ascontiguousarray(seen[:1079, :1919])), spec)


def test_unknown_format_type_or_layout_is_refused(reference, real_frames):
    import ctypes

    spec = Preprocess(resize={"width": 8, "height": 8})
    plan = PreprocessPlan.build(spec, "bgr8", 16, 16)
    out = np.zeros(plan.output_shape, np.float32)
    params = plan.bound(real_frames[0].ctypes.data, out.ctypes.data)
    for args in ((9, 0, 0), (0, 9, 0), (0, 0, 9)):
        assert reference.lib.pp_reference(ctypes.byref(params), *args) == -1
    assert not out.any()
