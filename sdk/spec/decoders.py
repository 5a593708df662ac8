"""Decoder kinds beyond SSD (sdk.spec.schema keeps `ssd`): YOLO (v5, v8, YOLOX, anchor-based v5), models that end
in their own NMS, classifiers and segmenters. Each is one `postprocess.decoder` mapping, told apart by `kind`.

Tensor names are checked against the model when the stage is built (the file cannot know them); every other
value is checked here, at load, with the one-line errors of sdk.spec.bounds.
"""


from typing import Annotated, Literal

from pydantic import Field, model_validator

from sdk.spec.bounds import MAX_TENSOR_SIDE, Flag, Frozen, Int, Real, bounds_error

_Stride = Int(1, MAX_TENSOR_SIDE, "a feature map's stride, input pixels per cell")
_AnchorSide = Real("an anchor's width or height, network-input pixels", gt=0, le=MAX_TENSOR_SIDE)
_AnchorSizes = Annotated[tuple[tuple[_AnchorSide, _AnchorSide], ...], Field(min_length=1, max_length=16)]
_DECODER = ("postprocess", "decoder")


class YoloDecoder(Frozen):
    kind: Literal["yolo"]
    output: str
    # v5: [1, N, 5 + C] decoded (cx, cy, w, h pixels, objectness, class scores) or, with `anchors`, raw logits;
    # v8: [1, 4 + C, N] decoded; yolox: [1, N, 5 + C] raw (grid offsets, log sizes, objectness and class scores).
    layout: Literal["v5", "v8", "yolox"]
    # yolox: the strides of the feature maps, in the order their cells follow each other in the output.
    strides: Annotated[tuple[_Stride, ...], Field(min_length=1, max_length=8)] = (8, 16, 32)
    # v5 with raw heads: {stride: [[w, h], ...]} (YOLOv5's `anchors`, in pixels), one entry per output scale in order.
    anchors: Annotated[dict[_Stride, _AnchorSizes], Field(max_length=8)] | None = None

    @model_validator(mode="after")
    def _anchors_for_v5(self) -> "YoloDecoder":
        if self.anchors is not None and self.layout != "v5":
            raise bounds_error(
                f"anchors with layout {self.layout}; allowed: anchors only with layout v5 (v8 and YOLOX are anchor-free)",
                hint="remove anchors, or set layout: v5 for a YOLOv5 with raw (undecoded) heads",
                path=(*_DECODER, "anchors"),
            )
        if self.anchors is not None and not self.anchors:
            raise bounds_error("{} names no stride; allowed: {stride: [[w, h], ...]} for each output scale", path=(*_DECODER, "anchors"))
        if "strides" in self.model_fields_set and self.layout != "yolox":
            raise bounds_error(
                f"strides with layout {self.layout}; allowed: strides only with layout yolox (v5's come from its anchors)",
                hint="remove strides" if self.layout == "v8" else "give the strides as the keys of anchors",
                path=(*_DECODER, "strides"),
            )
        return self

    def grid_strides(self) -> tuple[int, ...]:
        """The strides whose grids the output's rows follow (YOLOX and anchor-based v5), in order."""
        return tuple(self.anchors) if self.anchors is not None else self.strides


class NmsInsideDecoder(Frozen):
    """A model whose graph ends in NMS (TF Object Detection API, EfficientNMS, ONNX NonMaxSuppression heads):
    its detections are read as they are; the SDK runs no NMS of its own."""

    kind: Literal["nms_inside"]
    boxes: str  # [1, K, 4] (or [K, 4])
    scores: str  # [1, K]
    classes: str  # [1, K], integer or float class ids
    count: str | None = None  # [1] or [1, 1]: how many of the K rows are detections; none: every row (scores pad the rest)
    box_format: Literal["xyxy", "yxyx", "cxcywh"] = "xyxy"  # TF OD API: yxyx; EfficientNMS: xyxy
    normalized: Flag = False  # true: coordinates are fractions of the network input (TF OD API); false: its pixels
    class_offset: Int(-1, 1, "subtracted from a class id before it indexes `classes` (TF OD API: 1, its label map starts at 1)") = 0


class ClassifyDecoder(Frozen):
    kind: Literal["classify"]
    output: str  # [1, C] (or [C], [1, C, 1, 1])
    activation: Literal["softmax", "sigmoid", "none"] = "softmax"  # none: the model's output is already a probability
    top_k: Int(1, 1000, "classes reported per frame, best first") = 5
    labels: str | None = None  # a text file, one class name a line, beside the pipeline (instead of postprocess.classes)


class SegmentDecoder(Frozen):
    kind: Literal["segment"]
    output: str  # [1, C, H, W] (NCHW) or [1, H, W, C] (channels_last); one channel: a foreground probability
    channels_last: Flag = False
    # One channel: foreground where the probability (after `activation`) is above this. Several: per-pixel argmax.
    threshold: Real("one-channel masks: foreground above this probability", gt=0, lt=1) = 0.5
    activation: Literal["sigmoid", "none"] = "none"  # of a one-channel output (argmax needs none)
    labels: str | None = None


class DbDecoder(Frozen):
    """A DB (Differentiable Binarization) text detector's probability map -> one box per text region, as PaddleOCR's
    DBPostProcess makes them: pixels above `threshold`, a region's minimum-area rectangle scored by the mean probability
    inside it (kept from postprocess.score_threshold, PaddleOCR's box_thresh), grown by area x unclip_ratio / perimeter.
    Each detection is the rectangle's axis-aligned box, its four corners as keypoints; no NMS (regions do not overlap)."""

    kind: Literal["db"]
    output: str  # [1, 1, H, W]: the text probability of each network-input pixel
    threshold: Real("a pixel is text above this probability (PaddleOCR's det_db_thresh)", gt=0, lt=1) = 0.3
    unclip_ratio: Real("how far a region is grown: its area x this / its perimeter (PaddleOCR's `det_db_unclip_ratio`)", ge=0, le=10) = 1.5
    dilation: Flag = False  # grow the text pixels by a 2x2 dilation first (PaddleOCR's use_dilation)
    min_size: Int(1, MAX_TENSOR_SIDE, "regions whose rectangle is shorter than this many network pixels are dropped") = 3
    max_candidates: Int(1, 100_000, "text regions looked at per frame, at most") = 1000


# The decoders whose classes may come from a label file (`labels`) instead of postprocess.classes.
LABELLED = (ClassifyDecoder, SegmentDecoder)


def read_labels(path, where: str) -> tuple[str, ...]:
    """A label file's class names (one a line, blank lines and surrounding spaces dropped), or one ConfigError line."""
    from sdk.errors import ConfigError

    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{where}: cannot read {path}: {exc}", hint="one class name a line, UTF-8, beside the pipeline file") from None
    names = tuple(line.strip() for line in text.splitlines() if line.strip())
    if not names:
        raise ConfigError(f"{where}: {path} names no class", hint="one class name a line, in the model's class order")
    if len(names) > 10_000:
        raise ConfigError(f"{where}: {path} names {len(names)} classes; allowed: at most 10000", hint="one class name a line")
    return names


__all__ = ["LABELLED", "ClassifyDecoder", "DbDecoder", "NmsInsideDecoder", "SegmentDecoder", "YoloDecoder", "read_labels"]
