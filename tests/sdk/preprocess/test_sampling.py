"""The sampler choice: OpenCV's warp only where it samples at exact positions, else the separable
sampler, so every OpenCV gives the same pixels (float64 bilinear as the independent reference)."""

from __future__ import annotations

import tracemalloc

import cv2
import numpy as np
import pytest

from sdk.preprocess import CpuPreprocessor
from sdk.preprocess.sampling import warp_is_exact
from sdk.spec.schema import Preprocess

EXACT = 0.05  # of an 8-bit step; OpenCV 4's 1/32-pixel grid is ~4 steps off at a sharp edge of vtest.avi


@pytest.fixture(scope="module")
def frame(video_path):
    capture = cv2.VideoCapture(str(video_path))
    ok, image = capture.read()
    capture.release()
    assert ok
    return image


def bilinear(image: np.ndarray, out_w: int, out_h: int) -> np.ndarray:
    """Float64 bilinear at half-pixel centres, edges repeated: what exact sampling gives."""

    def taps(n_in: int, n_out: int):
        position = (np.arange(n_out) + 0.5) * n_in / n_out - 0.5
        first = np.floor(position)
        return np.clip(first, 0, n_in - 1).astype(int), np.clip(first + 1, 0, n_in - 1).astype(int), position - first

    y0, y1, fy = taps(image.shape[0], out_h)
    x0, x1, fx = taps(image.shape[1], out_w)
    pixels = image.astype(np.float64)
    rows = pixels[y0] * (1 - fy)[:, None, None] + pixels[y1] * fy[:, None, None]
    return rows[:, x0] * (1 - fx)[None, :, None] + rows[:, x1] * fx[None, :, None]


def preprocess(image: np.ndarray, sampler: str, width: int = 300, height: int = 300) -> tuple[np.ndarray, CpuPreprocessor]:
    spec = Preprocess(resize={"width": width, "height": height}, color="bgr", layout="nhwc")
    output = np.zeros(spec.tensor_shape, np.float32)
    pre = CpuPreprocessor(spec, output, sampler=sampler)
    pre(image)
    return output[0], pre


def test_the_probe_says_whether_this_opencvs_warp_samples_exactly(frame):
    warped, _ = preprocess(frame, "warp")
    error = np.abs(warped - bilinear(frame, 300, 300)).max()
    print(f"OpenCV {cv2.__version__}: warpAffine {error:.4f} steps from exact bilinear")
    assert warp_is_exact() == (error <= EXACT)


def test_auto_takes_the_warp_only_where_it_is_exact(frame):
    auto, pre = preprocess(frame, "auto")
    assert pre.sampler == ("warp" if warp_is_exact() else "separable")
    assert np.abs(auto - bilinear(frame, 300, 300)).max() <= EXACT


@pytest.mark.parametrize("size", [(300, 300), (1024, 768), (7, 5)])
def test_the_separable_sampler_is_exact_for_any_pixel_type(frame, size):
    expected = bilinear(frame, *size)
    for pixels in (frame, frame.astype(np.float32), frame.astype(np.uint16)):
        ours, _ = preprocess(pixels, "separable", *size)
        assert np.abs(ours - expected).max() <= EXACT, pixels.dtype


def test_the_separable_sampler_allocates_nothing_per_frame(frame):
    _, pre = preprocess(frame, "separable")
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        for _ in range(5):
            pre(frame)
        peak = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    assert peak < 16_384, f"{peak} bytes allocated while sampling (one 300x300x3 float32 temporary is 1 MB)"


def test_an_unknown_sampler_is_refused():
    spec = Preprocess(resize={"width": 8, "height": 8})
    with pytest.raises(ValueError, match="sampler 'nearest': expected one of auto, warp, separable"):
        CpuPreprocessor(spec, np.zeros(spec.tensor_shape, np.float32), sampler="nearest")
