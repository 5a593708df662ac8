"""The `preprocess` section: crop, resize, colour, normalisation, layout and type of the network input."""


import math
from typing import Literal

from pydantic import field_validator, model_validator

from sdk.spec.bounds import MAX_SOURCE_PIXELS, MAX_TENSOR_SIDE, Flag, Frozen, Int, Real, bounds_error


class Resize(Frozen):
    width: Int(1, MAX_TENSOR_SIDE, "network input width, pixels")
    height: Int(1, MAX_TENSOR_SIDE, "network input height, pixels")
    mode: Literal["stretch", "letterbox"] = "stretch"
    # The sampling grid of ONNX Resize: which source position an output pixel reads.
    coordinates: Literal["half_pixel", "asymmetric", "align_corners"] = "half_pixel"
    pad_value: Int(0, 255, "letterbox padding, 8-bit pixel value") = 114
    # Where a letterboxed image lands: centred (Ultralytics), or in the top-left corner with the padding right and
    # below (YOLOX's own preprocessing).
    align: Literal["center", "top_left"] = "center"
    # The letterboxed image's size, w * r by h * r (r = the scale that fits): rounded to the nearest pixel (Ultralytics'
    # LetterBox) or down (`floor`: YOLOX's preproc, int(w * r)); a pixel of difference shifts every sample.
    content: Literal["round", "floor"] = "round"


class Crop(Frozen):
    """A region of the source image (pixels) that is resized; the rest is ignored.

    Its origin must lie inside the frame (checked at load where the frame size is known, else when
    the first frame arrives); a crop running past the right or bottom edge is clipped to the frame.
    """

    x: Int(0, MAX_SOURCE_PIXELS - 1, "left edge in the source frame, pixels") = 0
    y: Int(0, MAX_SOURCE_PIXELS - 1, "top edge in the source frame, pixels") = 0
    width: Int(1, MAX_SOURCE_PIXELS, "pixels")
    height: Int(1, MAX_SOURCE_PIXELS, "pixels")


def _Scalar(description: str):  # noqa: N802
    return Real(description, ge=-1e6, le=1e6)


class Normalize(Frozen):
    """value = (pixel * scale - mean[c]) / std[c], per output channel."""

    scale: _Scalar("pixel factor, before mean and std") = 1.0
    mean: tuple[_Scalar("per channel"), _Scalar("per channel"), _Scalar("per channel")] = (0.0, 0.0, 0.0)
    std: tuple[_Scalar("per channel, not 0"), _Scalar("per channel, not 0"), _Scalar("per channel, not 0")] = (1.0, 1.0, 1.0)

    @field_validator("std")
    @classmethod
    def _nonzero_std(cls, std: tuple[float, float, float]) -> tuple[float, float, float]:
        if any(s == 0 for s in std):
            raise ValueError("std must not contain 0")
        if any(abs(s) < 1e-6 for s in std):
            raise ValueError(f"std {list(std)}: each must be at least 1e-06 in size (a smaller one overflows float32)")
        return std

    @property
    def is_identity(self) -> bool:
        return self.scale == 1.0 and self.mean == (0.0, 0.0, 0.0) and self.std == (1.0, 1.0, 1.0)


class Preprocess(Frozen):
    resize: Resize
    crop: Crop | None = None
    color: Literal["rgb", "bgr", "gray"] = "rgb"
    normalize: Normalize = Normalize()
    layout: Literal["nchw", "nhwc"] = "nchw"
    dtype: Literal["float32", "float16", "uint8"] = "float32"
    # Where the tensor is made: `auto` takes the CUDA kernels when a CUDA device, cuda-python and the
    # release's kernels are there (and the engine's input lives on that GPU), else the CPU path.
    device: Literal["auto", "cpu", "cuda"] = "auto"
    # The CUDA path of a frame (the kernel, the engine's enqueueV3, the decode kernel and the candidates' copy)
    # captured once as one CUDA graph and replayed per frame; off by default (sdk/gpu/graph.py, decision 0451).
    cuda_graph: Flag = False

    @model_validator(mode="after")
    def _graph_needs_the_cuda_path(self) -> "Preprocess":
        if self.cuda_graph and self.device == "cpu":
            raise bounds_error(
                "true with preprocess.device cpu; allowed: true only with device cuda or auto (the graph holds the CUDA path's work)",
                hint="set preprocess.device: cuda or auto, or drop preprocess.cuda_graph",
                path=("preprocess", "cuda_graph"),
            )
        return self

    @model_validator(mode="after")
    def _uint8_is_raw(self) -> "Preprocess":
        if self.dtype == "uint8" and not self.normalize.is_identity:
            raise ValueError("dtype uint8 carries raw pixels: normalize must be left at its defaults")
        return self

    @property
    def channels(self) -> int:
        return 1 if self.color == "gray" else 3

    @property
    def tensor_shape(self) -> tuple[int, int, int, int]:
        h, w, c = self.resize.height, self.resize.width, self.channels
        return (1, c, h, w) if self.layout == "nchw" else (1, h, w, c)

    @property
    def tensor_bytes(self) -> int:
        return math.prod(self.tensor_shape) * {"float32": 4, "float16": 2, "uint8": 1}[self.dtype]


CROP_HINT = "preprocess.crop is in source pixels: its x and y must lie inside the frame (a crop running past the right or bottom edge is clipped)"


def crop_outside(crop: Crop, width: int, height: int) -> tuple[str, str] | None:
    """(key, message) where the crop's origin lies outside a width x height frame, else None."""
    for key, value, edge, size in (("x", crop.x, "right", width), ("y", crop.y, "bottom", height)):
        if value >= size:
            return key, (
                f"{value} is outside the {width}x{height} frame; allowed: {key} from 0 to {size - 1} "
                f"(the crop starts inside the frame; a part past its {edge} edge is clipped)"
            )
    return None


__all__ = ["CROP_HINT", "Crop", "Normalize", "Preprocess", "Resize", "crop_outside"]
