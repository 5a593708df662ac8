"""Where every output pixel samples the source, and how boxes map back to source pixels.

Plain arithmetic shared by the OpenCV path, the CUDA kernels and the box decoders, so that
all three agree by construction. Coordinate modes are those of ONNX `Resize`
(`coordinate_transformation_mode`): the model's training pipeline decides which one is
right (TF's legacy bilinear resize is `asymmetric`; OpenCV and PyTorch use `half_pixel`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from sdk.errors import ConfigError
from sdk.spec.preprocess import CROP_HINT, crop_outside
from sdk.spec.schema import Crop, Resize


@dataclass(frozen=True)
class ResizeGeometry:
    source_width: int
    source_height: int
    # The part of the source that is resized (the crop, or all of it).
    crop_x: int
    crop_y: int
    crop_width: int
    crop_height: int
    # The output tensor and the rectangle of it the image lands in (letterbox pads the rest).
    out_width: int
    out_height: int
    pad_x: int
    pad_y: int
    content_width: int
    content_height: int
    coordinates: str

    @classmethod
    def plan(cls, source_width: int, source_height: int, resize: Resize, crop: Crop | None = None) -> ResizeGeometry:
        if crop is None:
            cx, cy, cw, ch = 0, 0, source_width, source_height
        else:
            problem = crop_outside(crop, source_width, source_height)
            if problem is not None:  # refused when the first frame shows the size, before any buffer is sized by it
                key, message = problem
                raise ConfigError(f"preprocess.crop.{key}: {message}", hint=CROP_HINT)
            # A crop larger than the frame is clipped to it (cameras differ by a few pixels).
            cx, cy = min(crop.x, source_width - 1), min(crop.y, source_height - 1)
            cw, ch = min(crop.width, source_width - cx), min(crop.height, source_height - cy)
        ow, oh = resize.width, resize.height
        if resize.mode == "stretch":
            content_w, content_h, pad_x, pad_y = ow, oh, 0, 0
        else:
            scale = min(ow / cw, oh / ch)
            size = math.floor if resize.content == "floor" else round
            content_w = max(1, min(ow, int(size(cw * scale))))
            content_h = max(1, min(oh, int(size(ch * scale))))
            pad_x, pad_y = ((ow - content_w) // 2, (oh - content_h) // 2) if resize.align == "center" else (0, 0)
        return cls(source_width, source_height, cx, cy, cw, ch, ow, oh, pad_x, pad_y, content_w, content_h, resize.coordinates)

    def sampling(self) -> tuple[float, float, float, float]:
        """(ax, bx, ay, by): content pixel u samples crop position a*u + b, per axis."""
        return (
            *_axis(self.crop_width, self.content_width, self.coordinates),
            *_axis(self.crop_height, self.content_height, self.coordinates),
        )

    def affine_to_source(self) -> np.ndarray:
        """2x3 matrix from content-pixel coordinates to crop-pixel coordinates (warpAffine, inverse map)."""
        ax, bx, ay, by = self.sampling()
        return np.array([[ax, 0.0, bx], [0.0, ay, by]], dtype=np.float64)

    @property
    def scale_x(self) -> float:
        return self.content_width / self.crop_width

    @property
    def scale_y(self) -> float:
        return self.content_height / self.crop_height

    def boxes_to_source(self, boxes: np.ndarray) -> None:
        """In place: [K, 4] x1, y1, x2, y2 in network-input pixels -> source pixels, clipped to the frame.

        Box edges are continuous coordinates: the edge of the content maps to the edge of
        the crop whatever the sampling grid, so this mapping is the same for every mode.
        """
        boxes[:, 0::2] -= self.pad_x
        boxes[:, 1::2] -= self.pad_y
        boxes[:, 0::2] *= 1.0 / self.scale_x
        boxes[:, 1::2] *= 1.0 / self.scale_y
        boxes[:, 0::2] += self.crop_x
        boxes[:, 1::2] += self.crop_y
        np.clip(boxes[:, 0::2], 0, self.source_width, out=boxes[:, 0::2])
        np.clip(boxes[:, 1::2], 0, self.source_height, out=boxes[:, 1::2])

    def points_to_source(self, points: np.ndarray) -> None:
        """In place: [K, 2] x, y in network-input pixels -> source pixels, as `boxes_to_source` maps box edges (not clipped)."""
        points[:, 0] -= self.pad_x
        points[:, 1] -= self.pad_y
        points[:, 0] *= 1.0 / self.scale_x
        points[:, 1] *= 1.0 / self.scale_y
        points[:, 0] += self.crop_x
        points[:, 1] += self.crop_y


def _axis(in_size: int, out_size: int, mode: str) -> tuple[float, float]:
    if mode == "asymmetric":
        return in_size / out_size, 0.0
    if mode == "align_corners":
        if out_size == 1:
            return 0.0, 0.0
        return (in_size - 1) / (out_size - 1), 0.0
    scale = in_size / out_size  # half_pixel
    return scale, 0.5 * scale - 0.5
