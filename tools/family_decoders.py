"""The decoder blocks `sdk init` writes for the families with a built-in kind beyond SSD and YOLO v5/v8: YOLOX
(`yolo`, layout yolox), models ending in NMS (`nms_inside`), classifiers (`classify`) and segmenters (`segment`).
Tensor names come from the model; what only the user knows is a FILL-IN placeholder (decision 0531)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from sdk.spec.placeholders import placeholder

if TYPE_CHECKING:
    from tools.model_tensors import Recognised, Tensor


def class_names(count: int, metadata: dict) -> tuple[list[str], bool]:
    import ast

    names = metadata.get("names")
    if names:
        try:
            parsed = ast.literal_eval(names)  # Ultralytics writes a dict {0: 'person', ...}
            listed = [str(parsed[i]) for i in range(count)] if isinstance(parsed, dict) else [str(n) for n in parsed]
            if len(listed) == count:
                return listed, True
        except (ValueError, SyntaxError, KeyError, TypeError):
            pass
    return [f"class_{i}" for i in range(count)], False


def final_op(name: str, made_by: dict) -> str:
    """The op that computed an output, looking through the ops that only move values (Identity, Reshape, ...)."""
    for _ in range(16):
        node = made_by.get(name)
        if node is None:
            return ""
        if node.op_type not in ("Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Cast"):
            return node.op_type
        name = node.input[0]
    return ""


def normalize_unknown(base: Recognised) -> None:
    base.preprocess.setdefault("normalize", placeholder("the model's training normalisation (e.g. ImageNet mean and std); check the model card"))


def yolox(base: Recognised, out: Tensor, classes: int, metadata: dict) -> Recognised:
    base.family = "yolox"
    base.summary = f"YOLOX head {out.name!r} {list(out.shape)}: one row per cell, objectness and {classes} class scores"
    four = sum(math.ceil(base.width / s) * math.ceil(base.height / s) for s in (8, 16, 32)) != out.shape[1]
    base.decoder = {"kind": "yolo", "output": out.name, "layout": "yolox", "strides": [8, 16, 32, 64] if four else [8, 16, 32]}
    base.classes, named = class_names(classes, metadata)
    if not named:
        base.notes.append("the model carries no class names: rename class_0 ... in postprocess.classes (they label detections.jsonl)")
    base.notes.append("YOLOX exports with decode_in_inference off (raw grid offsets); a head decoded in the graph is layout v5")
    base.preprocess.update(
        {
            "resize_mode": "letterbox",
            "pad_value": 114,
            "normalize": placeholder(
                "how the model expects its pixels; Megvii's YOLOX exports take BGR 0..255 as they are ({scale: 1.0} and preprocess.color: bgr)"
            ),
        }
    )
    return base


def nms_inside(base: Recognised, summary: str, outputs: list[Tensor]) -> Recognised:
    """A model that chose its detections: its boxes, scores, classes and count tensors named from their shapes and names."""
    base.family, base.summary = "nms-inside", summary
    boxes = [o for o in outputs if len(o.shape) in (2, 3) and o.shape[-1] == 4]
    rows = [o for o in outputs if o not in boxes and len(o.shape) in (1, 2) and not (isinstance(o.shape[-1], int) and o.shape[-1] == 1)]
    counts = [o for o in outputs if o not in boxes and o not in rows]

    def named(candidates: list[Tensor], words: tuple[str, ...], what: str) -> str:
        hits = [o for o in candidates if any(w in o.name.lower() for w in words)] or (candidates if len(candidates) == 1 else [])
        if len(hits) == 1:
            return hits[0].name
        listing = ", ".join(f"{o.name} {list(o.shape)}" for o in outputs)
        return placeholder(f"the output holding {what} (one of {listing})")

    base.decoder = {
        "kind": "nms_inside",
        "boxes": named(boxes, ("box",), "the kept boxes [1, K, 4]"),
        "scores": named(rows, ("score", "conf", "prob"), "the kept scores [1, K]"),
        "classes": named(rows, ("class", "label", "cls"), "the kept class ids [1, K]"),
    }
    if counts:
        base.decoder["count"] = named(counts, ("num", "count"), "the number of detections [1]")
    base.decoder.update(
        {
            "box_format": placeholder("the order of a box row: yxyx (TF Object Detection API), xyxy (EfficientNMS) or cxcywh"),
            "normalized": placeholder("true where boxes are fractions of the network input (TF Object Detection API), false for its pixels"),
            "class_offset": placeholder("1 where class ids start at 1 (TF Object Detection API label maps), else 0"),
        }
    )
    base.classes = placeholder("the model's class names, in class-id order (its label map)")
    if any(not o.static for o in outputs):
        base.notes.append("its outputs must have static shapes (K rows, padded): docs/guides/models.md shows how to pad a NonMaxSuppression head")
    normalize_unknown(base)
    return base


def _labels(count, what: str) -> list[str]:
    return [f"class_{i}" for i in range(count)] if isinstance(count, int) else [f"{what}_0"]


def classifier(base: Recognised, out: Tensor, summary: str, last_op: str) -> Recognised:
    base.family, base.summary = "classifier", summary
    count = out.shape[1]
    activation = "none" if last_op in ("Softmax", "Sigmoid", "LogSoftmax") else "softmax"
    base.decoder = {"kind": "classify", "output": out.name, "activation": activation, "top_k": min(5, count)}
    base.classes = _labels(count, "class")
    base.notes.append(
        f"activation {activation}: "
        + (f"the graph ends in {last_op}" if activation == "none" else "the graph ends in logits (use sigmoid for a multi-label model)")
    )
    base.notes.append("rename class_0 ... in postprocess.classes, or name a label file (decoder.labels, one class a line)")
    normalize_unknown(base)
    return base


def segmenter(base: Recognised, out: Tensor, summary: str, last_op: str) -> Recognised:
    base.family, base.summary = "segmenter", summary
    count = out.shape[1]
    base.decoder = {"kind": "segment", "output": out.name}
    if count == 1:  # a foreground probability
        base.decoder.update({"threshold": 0.5, "activation": "none" if last_op == "Sigmoid" else "sigmoid"})
        base.classes = ["background", "foreground"]
        base.notes.append(
            "one channel: a foreground probability, thresholded at 0.5" + (" (the graph ends in Sigmoid)" if last_op == "Sigmoid" else "")
        )
    else:
        base.classes = _labels(count, "class")
        base.notes.append("rename class_0 ... in postprocess.classes (class 0 is often the background)")
    normalize_unknown(base)
    return base


__all__ = ["class_names", "classifier", "final_op", "nms_inside", "normalize_unknown", "segmenter", "yolox"]
