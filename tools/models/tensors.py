"""What `sdk init` reads off a model: its tensors, and the family it recognised with what it will write
(shared by tools/models/families.py, which recognises, and tools/models/family_decoders.py, which writes decoder blocks)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Tensor:
    name: str
    shape: tuple  # ints, or strings for dynamic dimensions
    dtype: str

    @property
    def static(self) -> bool:
        return all(isinstance(d, int) and d > 0 for d in self.shape)


@dataclass
class Recognised:
    family: str  # ssd-tf, ssd, yolo-v5, yolo-v8, yolox, nms-inside, classifier, segmenter, unknown
    summary: str  # one line: what was seen
    image: Tensor
    layout: str  # nchw | nhwc
    width: int | str
    height: int | str
    extra_inputs: list[Tensor] = field(default_factory=list)
    decoder: dict = field(default_factory=dict)
    classes: list[str] | str = field(default_factory=list)  # or a placeholder where the model cannot tell how many
    preprocess: dict = field(default_factory=dict)  # resize mode/coordinates/pad, color, normalize (a dict or a placeholder)
    prepare: dict | None = None
    # postprocess.score_threshold, iou_threshold, nms as the family's own code runs it, and `source`: whose values they are
    thresholds: dict = field(default_factory=dict)
    characters: list[str] | None = None  # a CTC recogniser's symbols, from the model (PaddleOCR's `character` metadata)
    notes: list[str] = field(default_factory=list)
    outputs: list[Tensor] = field(default_factory=list)
