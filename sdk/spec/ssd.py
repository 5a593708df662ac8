"""The SSD decoder's settings (`decoder.kind: ssd`): the model's tensors, its anchors (a tensor of the graph or
MediaPipe's SsdAnchorsCalculator options) and its box coding. Used by `postprocess.decoder` and by a cascade step's
decoder (sdk.spec.cascade). The checks below name their keys under `postprocess.decoder`; the loader moves them under
`cascade[i].decoder` when the decoder is a cascade step's (sdk.spec.loader.config_error)."""


from typing import Annotated, Literal, Union

from pydantic import BeforeValidator, Field, model_validator

from sdk.spec.bounds import MAX_TENSOR_SIDE, Flag, Frozen, Int, Real, bounds_error, shown

ANCHORS_AT = ("postprocess", "decoder", "anchors", "generate")

_BoxScale = Real("box coder scale, in `box_layout` order (`yxhw`: y, x, h, w; `xywh`: x, y, w, h)", gt=0, le=10_000)
MAX_GENERATED_ANCHORS = 1_000_000  # [N, 4] float32 anchors plus [N, 4 + 2K] decoded rows: tens of MiB at most
GENERATE_HINT = "copy the options of the model's SsdAnchorsCalculator node (MediaPipe graph config) under anchors.generate"


class SsdAnchorOptions(Frozen):
    """MediaPipe's `SsdAnchorsCalculatorOptions`, by the same names: anchors laid on the network input, layer by layer."""

    num_layers: Int(1, 64, "feature map layers; one stride each")
    min_scale: Real("anchor scale of the first layer, relative to the input", gt=0, le=100)
    max_scale: Real("anchor scale of the last layer, relative to the input", gt=0, le=100)
    input_size_width: Int(1, MAX_TENSOR_SIDE, "network input width the anchors are laid on, pixels (= `preprocess.resize.width`)")
    input_size_height: Int(1, MAX_TENSOR_SIDE, "network input height the anchors are laid on, pixels (= `preprocess.resize.height`)")
    anchor_offset_x: Real("anchor centre within its cell, fraction of the cell (0.5: the middle)", ge=0, le=1) = 0.5
    anchor_offset_y: Real("anchor centre within its cell, fraction of the cell (0.5: the middle)", ge=0, le=1) = 0.5
    # One per layer; consecutive layers of equal stride share one grid, their anchors interleaved per cell.
    strides: Annotated[tuple[Int(1, MAX_TENSOR_SIDE, "a layer's stride, input pixels per feature map cell"), ...], Field(max_length=64)]
    aspect_ratios: Annotated[tuple[Real("width / height of an anchor", gt=0, le=1000), ...], Field(max_length=64)] = ()
    fixed_anchor_size: Flag = False  # every anchor is w = h = 1: the model regresses sizes in input units (BlazeFace)
    interpolated_scale_aspect_ratio: Real(
        "aspect ratio of the extra anchor at scale sqrt(scale * next scale) on every layer; 0: no extra anchor", ge=0, le=1000
    ) = 1.0
    reduce_boxes_in_lowest_layer: Flag = False  # layer 0: three anchors (scale 0.1 ratio 1, scale ratio 2, scale ratio 0.5)

    @model_validator(mode="after")
    def _consistent(self) -> "SsdAnchorOptions":
        if len(self.strides) != self.num_layers:
            raise bounds_error(
                f"{len(self.strides)} stride(s) {list(self.strides)} for num_layers {self.num_layers}; allowed: exactly {self.num_layers} "
                "strides, one per layer",
                hint=GENERATE_HINT,
                path=(*ANCHORS_AT, "strides"),
            )
        if self.max_scale < self.min_scale:
            raise bounds_error(
                f"{shown(self.max_scale)} is below min_scale {shown(self.min_scale)}; allowed: a number from {shown(self.min_scale)} to 100 "
                "(scales grow from the first layer to the last)",
                hint=GENERATE_HINT,
                path=(*ANCHORS_AT, "max_scale"),
            )
        if not self.aspect_ratios and self.interpolated_scale_aspect_ratio == 0 and not self.reduce_boxes_in_lowest_layer:
            raise bounds_error(
                "[] with interpolated_scale_aspect_ratio 0 places no anchor at all; allowed: at least one aspect ratio, "
                "or an interpolated_scale_aspect_ratio above 0",
                hint=GENERATE_HINT,
                path=(*ANCHORS_AT, "aspect_ratios"),
            )
        count = self.anchor_count
        if count > MAX_GENERATED_ANCHORS:
            raise bounds_error(
                f"{list(self.strides)} on {self.input_size_width}x{self.input_size_height} would generate {count} anchors; "
                f"allowed: at most {MAX_GENERATED_ANCHORS} anchors (the generated-anchors cap)",
                hint="check strides and input_size_width/height against the model's feature maps",
                path=(*ANCHORS_AT, "strides"),
            )
        return self

    @property
    def anchor_count(self) -> int:
        """How many anchors these options generate (sdk.anchors makes them; a test holds the two equal)."""
        count, layer = 0, 0
        while layer < self.num_layers:
            stride, per_cell = self.strides[layer], 0
            while layer < self.num_layers and self.strides[layer] == stride:
                if layer == 0 and self.reduce_boxes_in_lowest_layer:
                    per_cell += 3
                else:
                    per_cell += len(self.aspect_ratios) + (1 if self.interpolated_scale_aspect_ratio > 0 else 0)
                layer += 1
            count += -(-self.input_size_height // stride) * -(-self.input_size_width // stride) * per_cell
        return count


class GeneratedAnchors(Frozen):
    generate: SsdAnchorOptions


def _anchor_source(value: object) -> object:
    """A tensor name stays a string; a mapping must be {generate: {...}}; anything else is refused in one line."""
    if isinstance(value, (str, GeneratedAnchors)):
        return value
    allowed = "allowed: the name of a constant tensor of the model, or {generate: {...}} with MediaPipe's SsdAnchorsCalculator options"
    if isinstance(value, dict):
        if "generate" not in value:
            keys = ", ".join(str(k) for k in value) or "no key"
            raise bounds_error(f"a mapping of {keys} without `generate`; {allowed}", hint=GENERATE_HINT)
        return GeneratedAnchors.model_validate(value)  # its errors keep their paths (anchors.generate.KEY)
    raise bounds_error(f"{shown(value)} is neither a tensor name nor a mapping; {allowed}", hint=GENERATE_HINT)


AnchorSource = Annotated[Union[str, GeneratedAnchors], BeforeValidator(_anchor_source)]  # noqa: UP007


class SsdDecoder(Frozen):
    kind: Literal["ssd"]
    box_encodings: str
    class_logits: str
    # A constant tensor of the ORIGINAL graph, read exactly at preparation; or {generate: {...}}, made on the device.
    anchors: AnchorSource
    anchor_layout: Literal["yxyx", "xyxy"] = "yxyx"  # corner order of an anchor tensor
    # What a row of box_encodings holds: centre and size offsets in this order, then `keypoints` pairs in the same order.
    box_layout: Literal["yxhw", "xywh"] = "yxhw"
    # exp: size = exp(t / scale) * anchor (TF, log-space); linear: size = t / scale * anchor (MediaPipe BlazeFace).
    box_size: Literal["exp", "linear"] = "exp"
    # TF Object Detection API's FasterRcnnBoxCoder scales (y, x, h, w), from the training config; in box_layout order.
    scale_factors: tuple[_BoxScale, _BoxScale, _BoxScale, _BoxScale] = (10.0, 10.0, 5.0, 5.0)
    keypoints: Int(0, 64, "keypoints per detection, decoded like the box centre (MediaPipe's num_keypoints)") = 0
    score_activation: Literal["sigmoid", "softmax"] = "sigmoid"
    background_class: Flag = True
    clip_boxes: Flag = True

    @model_validator(mode="after")
    def _layout_of_a_tensor(self) -> "SsdDecoder":
        if isinstance(self.anchors, GeneratedAnchors) and "anchor_layout" in self.model_fields_set:
            raise bounds_error(
                f"{self.anchor_layout} describes the corners of an anchor tensor, and generated anchors have none; "
                "allowed: anchor_layout only with anchors naming a tensor",
                hint="remove anchor_layout: generated anchors are centre, width and height by construction",
                path=("postprocess", "decoder", "anchor_layout"),
            )
        return self


def check_anchors_on_input(decoder, resize, *, whose: str = "") -> None:
    """Generated anchors are laid on the network input the preprocessing makes: their input size must be
    `preprocess.resize` (`whose`: "the step's " for a cascade step, whose loader moves the path under it)."""
    if not (isinstance(decoder, SsdDecoder) and isinstance(decoder.anchors, GeneratedAnchors)):
        return
    options = decoder.anchors.generate
    for key, value, side in (
        ("input_size_width", options.input_size_width, resize.width),
        ("input_size_height", options.input_size_height, resize.height),
    ):
        if value != side:
            axis = key.rsplit("_", 1)[1]
            raise bounds_error(
                f"{value} differs from {whose}preprocess.resize.{axis} {side}; allowed: the model's input {axis}, the same in both (the "
                f"anchors are laid on the network input {whose or 'the '}preprocessing makes)",
                hint=f"set {whose}preprocess.resize and the anchor options both to the {'step ' if whose else ''}model's input size (its "
                "input tensor's height and width): either one may be the wrong one",
                path=(*ANCHORS_AT, key),
            )


__all__ = [
    "ANCHORS_AT",
    "GENERATE_HINT",
    "MAX_GENERATED_ANCHORS",
    "AnchorSource",
    "GeneratedAnchors",
    "SsdAnchorOptions",
    "SsdDecoder",
    "check_anchors_on_input",
]
