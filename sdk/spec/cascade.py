"""`cascade:`: models run on the crops of the first model's detections (plate -> characters, face -> landmarks).

Each step names its model, which detections it takes (classes, min score, at most so many a frame), how a crop
is cut (padding, square, min size), the crop's own preprocessing, and a decoder: `classify` (top-k labels), `ctc`
(text, greedy CTC over a character list file) or `ssd` (boxes and keypoints inside the crop, mapped to frame pixels:
the top-level SSD decoder's settings plus the class names and thresholds that `postprocess` holds for the first
model). Results attach to the parent detection in detections.jsonl.
"""


from typing import Annotated, Literal, Union

from pydantic import Field, field_validator, model_validator

from sdk.spec.bounds import MAX_TENSOR_SIDE, Flag, Frozen, Int, Real
from sdk.spec.preprocess import Preprocess
from sdk.spec.ssd import SsdDecoder, check_anchors_on_input


class CascadeTakes(Frozen):
    classes: Annotated[tuple[str, ...], Field(max_length=1000)] = ()  # labels of the first model; empty: every class
    min_score: Real("parent detections scoring below are not cropped", ge=0, le=1) = 0.5
    max_per_frame: Int(1, 256, "crops a frame at most, highest scores first") = 8


class CascadeCrop(Frozen):
    padding: Real("added on each side, as a fraction of the box's width and height", ge=0, le=2) = 0.0
    square: Flag = False  # widen the shorter side to the longer (before padding), centred
    min_size: Int(1, MAX_TENSOR_SIDE, "boxes narrower or lower than this many source pixels are not cropped") = 4


class CascadeModel(Frozen):
    path: str
    threads: Int(1, 256, "CPU threads of ONNX Runtime; null: its default") | None = None


class ClassifyDecoder(Frozen):
    kind: Literal["classify"]
    labels: Annotated[tuple[str, ...], Field(min_length=1, max_length=100_000)]
    activation: Literal["softmax", "sigmoid", "none"] = "softmax"
    top_k: Int(1, 100, "labels kept per crop, best first") = 1


class CtcDecoder(Frozen):
    kind: Literal["ctc"]
    characters: str  # a UTF-8 file beside the pipeline, one symbol per line; output index i + 1 is line i (0 is the blank)
    space: Flag = False  # the model's last index is a space (PaddleOCR's use_space_char)


class CascadeSsdDecoder(SsdDecoder):
    """The SSD decoder on a crop: `kind: ssd` with the top-level decoder's keys (anchors a tensor of the step's model or
    `{generate: {...}}`, box_layout, box_size, scale_factors, keypoints, ...) and, since a step has no `postprocess`
    section, its class names and thresholds. NMS per crop; boxes and keypoints in source-frame pixels."""

    classes: Annotated[tuple[str, ...], Field(min_length=1, max_length=10_000)]  # the step model's class names, in its order
    score_threshold: Real("detections on a crop scoring below are dropped", ge=0, le=1) = 0.5
    iou_threshold: Real("non-maximum suppression on a crop: overlap above which the lower score goes", gt=0, le=1) = 0.3
    max_detections: Int(1, 1000, "detections kept per crop, highest scores first") = 10


class CascadeStep(Frozen):
    name: Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]{0,31}$")]
    model: CascadeModel
    takes: CascadeTakes = CascadeTakes()
    crop: CascadeCrop = CascadeCrop()
    preprocess: Preprocess
    decoder: Annotated[Union[ClassifyDecoder, CtcDecoder, CascadeSsdDecoder], Field(discriminator="kind")]  # noqa: UP007

    @model_validator(mode="after")
    def _anchors_laid_on_the_crop_input(self) -> "CascadeStep":
        check_anchors_on_input(self.decoder, self.preprocess.resize, whose="the step's ")  # moved under cascade[i].decoder by the loader
        return self

    @field_validator("preprocess")
    @classmethod
    def _no_graph(cls, preprocess: Preprocess) -> Preprocess:
        if preprocess.cuda_graph:
            raise ValueError("cuda_graph: true; allowed: false (a cascade step's crops are preprocessed on the CPU)")
        return preprocess


Cascade = Annotated[tuple[CascadeStep, ...], Field(max_length=8)]

__all__ = ["Cascade", "CascadeCrop", "CascadeModel", "CascadeSsdDecoder", "CascadeStep", "CascadeTakes", "ClassifyDecoder", "CtcDecoder"]
