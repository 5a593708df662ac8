"""Camera pixel formats a frame can carry: packed BGR (OpenCV's order) or NV12 with its colour.

`Nv12Image` is an NV12 frame as Argus, NVDEC and GStreamer's appsink hand it out: a Y plane and an
interleaved U, V plane at half resolution in both axes, each with its own pitch (row stride in bytes),
and the YUV colour (matrix and range) the source declared. The CUDA preprocessor reads the planes in
place (the NV12 kernel converts, resizes, letterboxes and normalises in one pass); the CPU path and the
stages that draw or crop convert to BGR with OpenCV (`to_bgr`).

`YuvColour` gives the kernels' Q20 fixed-point conversion (`PpParams.yuv`, plugins_cuda/include/pp_params.h).
BT.601 limited range is OpenCV's COLOR_YUV2BGR_NV12 to the bit (its constants); BT.601 full range and
BT.709 are computed from the matrix's Kr, Kb (ITU-R BT.601 / BT.709) with the same integer arithmetic,
done here in numpy (OpenCV has no NV12 conversion for them).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sdk.errors import SourceError

SHIFT = 20  # Q20, as PP_SHIFT in pp_math.cuh
MATRICES = {"bt601": (0.299, 0.114), "bt709": (0.2126, 0.0722)}  # (Kr, Kb)
RANGES = ("limited", "full")
# OpenCV's BT.601 limited-range constants (imgproc color_yuv: 1.164, 2.018, -0.391, -0.813, 1.596 in Q20).
_OPENCV_BT601 = (16, 1220542, 2116026, -409993, -852492, 1673527)


@dataclass(frozen=True)
class YuvColour:
    matrix: str = "bt601"
    range: str = "limited"

    def __post_init__(self) -> None:
        if self.matrix not in MATRICES:
            raise SourceError(f"YUV colour matrix {self.matrix!r}; supported: {', '.join(MATRICES)}")
        if self.range not in RANGES:
            raise SourceError(f"YUV range {self.range!r}; supported: {', '.join(RANGES)}")

    @property
    def name(self) -> str:
        return f"{self.matrix} {self.range} range"

    @property
    def is_opencv(self) -> bool:
        """OpenCV's COLOR_YUV2BGR_NV12 converts exactly this colour (BT.601 limited range)."""
        return self.matrix == "bt601" and self.range == "limited"

    def coefficients(self) -> tuple[int, int, int, int, int, int]:
        """(luma offset, Y, U->B, U->G, V->G, V->R) in Q20: PpParams.yuv."""
        if self.is_opencv:
            return _OPENCV_BT601
        kr, kb = MATRICES[self.matrix]
        kg = 1.0 - kr - kb
        luma, chroma, offset = (255 / 219, 255 / 224, 16) if self.range == "limited" else (1.0, 1.0, 0)
        one = 1 << SHIFT
        return (
            offset,
            round(luma * one),
            round(2 * (1 - kb) * chroma * one),
            round(-2 * kb * (1 - kb) / kg * chroma * one),
            round(-2 * kr * (1 - kr) / kg * chroma * one),
            round(2 * (1 - kr) * chroma * one),
        )


BT601_LIMITED = YuvColour()


def yuv_to_bgr(y: np.ndarray, u: np.ndarray, v: np.ndarray, colour) -> np.ndarray:
    """pp_yuv_to_bgr (pp_math.cuh) over arrays of equal shape: uint8 B, G, R in the last axis.
    `colour`: a YuvColour, or its six Q20 coefficients (a parameter block's `yuv`)."""
    offset, cy, cub, cug, cvg, cvr = colour.coefficients() if isinstance(colour, YuvColour) else tuple(colour)
    half = 1 << (SHIFT - 1)
    yy = np.maximum(y.astype(np.int32) - offset, 0) * cy + half
    u = u.astype(np.int32) - 128
    v = v.astype(np.int32) - 128
    out = np.empty(y.shape + (3,), np.uint8)
    out[..., 0] = np.clip((yy + cub * u) >> SHIFT, 0, 255)
    out[..., 1] = np.clip((yy + cvg * v + cug * u) >> SHIFT, 0, 255)
    out[..., 2] = np.clip((yy + cvr * v) >> SHIFT, 0, 255)
    return out


class Nv12Image:
    """An NV12 frame: `y` (H x W uint8, rows `pitch` bytes apart) and `uv` (ceil(H/2) x ceil(W/2) x 2
    uint8, U then V, rows `uv_pitch` bytes apart), both views into the source's buffers."""

    format = "nv12"
    ndim = 3  # stages that ask `image.ndim == 2` for gray frames: NV12 is a colour frame

    def __init__(self, y: np.ndarray, uv: np.ndarray, colour: YuvColour = BT601_LIMITED, device: tuple[int, int] | None = None) -> None:
        """`device`: where the source has the planes in memory the GPU reads (a mapped NVMM surface, a
        buffer the source allocated on the CUDA device): the (Y, UV) addresses, with `y` and `uv` the host
        views of the same memory at the same pitches. The CUDA preprocessor then launches on them in place."""
        if y.dtype != np.uint8 or uv.dtype != np.uint8 or y.ndim != 2 or uv.ndim != 3 or uv.shape[2] != 2:
            raise SourceError(f"an NV12 frame is a uint8 H x W luma plane and an H/2 x W/2 x 2 chroma plane, got {y.shape} and {uv.shape}")
        h, w = y.shape
        if uv.shape[:2] != ((h + 1) // 2, (w + 1) // 2):
            raise SourceError(f"the chroma plane of a {w}x{h} NV12 frame is {(w + 1) // 2}x{(h + 1) // 2} pairs, got {uv.shape[1]}x{uv.shape[0]}")
        if y.strides[1] != 1 or uv.strides[2] != 1 or uv.strides[1] != 2:
            raise SourceError("NV12 planes must have contiguous rows (only the row pitch may be larger than the width)")
        self.y, self.uv, self.colour, self.device = y, uv, colour, device

    @property
    def shape(self) -> tuple[int, int, int]:
        """(height, width, 3): the size of the BGR image it stands for."""
        return self.y.shape[0], self.y.shape[1], 3

    @property
    def width(self) -> int:
        return self.y.shape[1]

    @property
    def height(self) -> int:
        return self.y.shape[0]

    @property
    def pitch(self) -> int:
        return self.y.strides[0]

    @property
    def uv_pitch(self) -> int:
        return self.uv.strides[0]

    @property
    def nbytes(self) -> int:
        return self.y.size + self.uv.size

    @classmethod
    def empty(cls, width: int, height: int, colour: YuvColour = BT601_LIMITED) -> Nv12Image:
        """One tightly packed buffer, Y rows then UV rows (OpenCV's and GStreamer's default layout)."""
        cw, ch = (width + 1) // 2, (height + 1) // 2
        buffer = np.empty(width * height + 2 * cw * ch, np.uint8)
        y = buffer[: width * height].reshape(height, width)
        uv = buffer[width * height :].reshape(ch, cw, 2)
        return cls(y, uv, colour)

    @classmethod
    def from_opencv(cls, stacked: np.ndarray, colour: YuvColour = BT601_LIMITED) -> Nv12Image:
        """The (H * 3/2) x W single-channel Mat that OpenCV's GStreamer backend returns for NV12 caps
        (Y rows, then the UV rows; even sizes): views, no copy."""
        if stacked.ndim != 2 or stacked.shape[0] % 3 or stacked.shape[1] % 2:
            raise SourceError(f"an NV12 buffer from OpenCV is (H*3/2) x W with even H and W, got {stacked.shape}")
        height = stacked.shape[0] * 2 // 3
        y = stacked[:height]
        uv = stacked[height:].reshape(height // 2, stacked.shape[1] // 2, 2)
        return cls(y, uv, colour)

    @classmethod
    def from_bgr(cls, bgr: np.ndarray, out: Nv12Image | None = None) -> Nv12Image:
        """BT.601 limited-range NV12 of an even-sized BGR image, with OpenCV (BGR -> I420, chroma
        interleaved): what a camera delivers, for replaying a recording as NV12."""
        import cv2

        h, w = bgr.shape[:2]
        if h % 2 or w % 2:
            raise SourceError(f"NV12 replay needs an even frame size, the recording is {w}x{h}")
        if out is None or out.shape != (h, w, 3):
            out = cls.empty(w, h)
        i420 = cv2.cvtColor(bgr, cv2.COLOR_BGR2YUV_I420)
        quarter = (h // 2) * (w // 2)
        flat = i420.reshape(-1)
        np.copyto(out.y, i420[:h])
        out.uv[..., 0] = flat[h * w : h * w + quarter].reshape(h // 2, w // 2)
        out.uv[..., 1] = flat[h * w + quarter :].reshape(h // 2, w // 2)
        return out

    def to_bgr(self, out: np.ndarray | None = None) -> np.ndarray:
        """BGR with OpenCV (BT.601 limited range, bit-equal to the kernel), else the kernel's integer math."""
        if self.colour.is_opencv:
            import cv2

            if self.width % 2 == 0 and self.height % 2 == 0:
                return cv2.cvtColorTwoPlane(self.y, self.uv, cv2.COLOR_YUV2BGR_NV12, dst=out)
        u = np.repeat(np.repeat(self.uv[..., 0], 2, axis=0), 2, axis=1)[: self.height, : self.width]
        v = np.repeat(np.repeat(self.uv[..., 1], 2, axis=0), 2, axis=1)[: self.height, : self.width]
        bgr = yuv_to_bgr(self.y, u, v, self.colour)
        if out is None:
            return bgr
        np.copyto(out, bgr)
        return out

    def copy(self) -> Nv12Image:
        other = Nv12Image.empty(self.width, self.height, self.colour)
        other.copy_from(self)
        return other

    def copy_from(self, other: Nv12Image) -> None:
        np.copyto(self.y, other.y)
        np.copyto(self.uv, other.uv)
        self.colour = other.colour


def as_bgr(image) -> np.ndarray:
    """A frame's pixels as BGR (or gray) for stages that draw or crop: NV12 is converted, BGR returned as is."""
    return image.to_bgr() if isinstance(image, Nv12Image) else image


def pixel_format(image) -> str:
    return "nv12" if isinstance(image, Nv12Image) else ("gray8" if image.ndim == 2 else "bgr8")


def same_layout(a, b) -> bool:
    """Whether a buffer of `a`'s kind and size can hold `b` (the live capture's buffer pool)."""
    if isinstance(a, Nv12Image) or isinstance(b, Nv12Image):
        return isinstance(a, Nv12Image) and isinstance(b, Nv12Image) and a.shape == b.shape
    return a.shape == b.shape and a.dtype == b.dtype


def empty_like_pixels(image):
    return Nv12Image.empty(image.width, image.height, image.colour) if isinstance(image, Nv12Image) else np.empty_like(image)


def copy_pixels(dst, src) -> None:
    if isinstance(src, Nv12Image):
        dst.copy_from(src)
    else:
        np.copyto(dst, src)


__all__ = [
    "BT601_LIMITED",
    "MATRICES",
    "Nv12Image",
    "RANGES",
    "YuvColour",
    "as_bgr",
    "copy_pixels",
    "empty_like_pixels",
    "pixel_format",
    "same_layout",
    "yuv_to_bgr",
]
