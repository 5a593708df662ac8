"""Bilinear sampling at the exact positions of a resize geometry, whatever OpenCV is installed.

`cv2.warpAffine` on float32 pixels samples at the exact position from OpenCV 5 on (0.008 of an
8-bit step from float64 bilinear on vtest.avi). OpenCV 4.x rounds every position to 1/32 pixel
(`INTER_TAB_SIZE`): 3.8 steps off at a sharp edge of the same frame, 0.065 on average. JetPack 6
ships OpenCV 4.8 and a host gets 5 from PyPI, so a device would preprocess other pixels than the
host calibrated and judged with. Where the installed warp is not exact (`warp_is_exact`, a probe
run once), `SeparableBilinear` samples instead: the resize is axis-aligned, so bilinear is a blend
of two rows and then of two columns, with weights computed once per geometry in float64. Written
by hand because no OpenCV 4 call samples a float image at unrounded positions (`remap` and `resize`
share the fixed-point tables, and `resize` knows only half-pixel centres). Measured on x86, the
whole preprocessing of a 768x576 frame into 300x300: 1.85 ms with it against 0.67 ms with the warp.
"""

from __future__ import annotations

import functools

import numpy as np

from sdk.geometry import ResizeGeometry

SAMPLERS = ("auto", "warp", "separable")


@functools.cache
def warp_is_exact() -> bool:
    """Whether this OpenCV's float warpAffine samples between pixels at the exact position: a row of
    alternating 0 and 255 sampled at positions 0.37 apart (a 1/32 grid is up to 4 steps off)."""
    import cv2

    source = np.tile(np.array([0.0, 255.0], np.float32), 16)[None, :, None].repeat(3, axis=2)
    matrix = np.array([[0.37, 0.0, 0.11], [0.0, 1.0, 0.0]])
    warped = cv2.warpAffine(source, matrix, (80, 1), flags=cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP, borderMode=cv2.BORDER_REPLICATE)
    positions = np.clip(0.37 * np.arange(80) + 0.11, 0, source.shape[1] - 1)
    exact = np.interp(positions, np.arange(source.shape[1]), source[0, :, 0].astype(np.float64))
    return bool(np.abs(warped[0, :, 0] - exact).max() < 0.05)


def _taps(scale: float, offset: float, out_size: int, in_size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each output index u: the two neighbouring input indices of position scale*u + offset,
    clamped to the image (its edge pixels repeat, as in ONNX Resize and TF), and the second's weight."""
    position = scale * np.arange(out_size, dtype=np.float64) + offset
    first = np.floor(position)
    weight = (position - first).astype(np.float32)
    first = first.astype(np.intp)
    return np.clip(first, 0, in_size - 1), np.clip(first + 1, 0, in_size - 1), weight


class SeparableBilinear:
    """Bilinear sampling of a crop into a float32 image of the geometry's content size, rows first
    then columns. Buffers are allocated here and when the crop's pixel type changes; a call allocates
    nothing."""

    def __init__(self, geometry: ResizeGeometry, channels: int) -> None:
        ax, bx, ay, by = geometry.sampling()
        self._row_first, self._row_second, row_weight = _taps(ay, by, geometry.content_height, geometry.crop_height)
        self._col_first, self._col_second, col_weight = _taps(ax, bx, geometry.content_width, geometry.crop_width)
        rows_shape = (geometry.content_height, geometry.crop_width, channels)
        content_shape = (geometry.content_height, geometry.content_width, channels)
        # Weights spelled out per element: a broadcast operand makes numpy allocate iteration buffers
        # every call (~30 KB) and ran 10x slower for the columns (0.67 against 0.05 ms).
        self._row_weight = np.ascontiguousarray(np.broadcast_to(row_weight[:, None, None], rows_shape))
        self._col_weight = np.ascontiguousarray(np.broadcast_to(col_weight[None, :, None], content_shape))
        self._row_pair = (np.empty(rows_shape, np.uint8), np.empty(rows_shape, np.uint8))  # gathered in the crop's type
        self._rows = np.empty(rows_shape, np.float32)  # the two rows, blended
        self._upper = np.empty(rows_shape, np.float32)
        self._col_pair = (np.empty(content_shape, np.float32), np.empty(content_shape, np.float32))

    def __call__(self, crop: np.ndarray, out: np.ndarray) -> None:
        """`crop`: (crop_height, crop_width, channels) pixels; `out`: float32 (content_height,
        content_width, channels), may be a view into a larger canvas."""
        upper, lower = self._row_pair
        if upper.dtype != crop.dtype:  # a source of another pixel type (first frame of it)
            self._row_pair = upper, lower = np.empty(upper.shape, crop.dtype), np.empty(upper.shape, crop.dtype)
        # mode="clip": the indices are in range already, and "raise" would buffer the output.
        np.take(crop, self._row_first, axis=0, out=upper, mode="clip")
        np.take(crop, self._row_second, axis=0, out=lower, mode="clip")
        # Converted by copyto first: a ufunc that casts its inputs allocates a buffer each call.
        rows, upper_float = self._rows, self._upper
        np.copyto(upper_float, upper, casting="unsafe")
        np.copyto(rows, lower, casting="unsafe")
        np.subtract(rows, upper_float, out=rows)
        np.multiply(rows, self._row_weight, out=rows)
        np.add(rows, upper_float, out=rows)
        left, right = self._col_pair
        np.take(rows, self._col_first, axis=1, out=left, mode="clip")
        np.take(rows, self._col_second, axis=1, out=right, mode="clip")
        np.subtract(right, left, out=right)
        np.multiply(right, self._col_weight, out=right)
        np.add(left, right, out=out)
