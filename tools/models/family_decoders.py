"""The decoder blocks `sdk init` writes for the families with a built-in kind beyond SSD and YOLO v5/v8: YOLOX
(`yolo`, layout yolox), models ending in NMS (`nms_inside`), classifiers (`classify`) and segmenters (`segment`).
Tensor names come from the model; what only the user knows is a FILL-IN placeholder (decision 0531)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from sdk.spec.placeholders import placeholder

if TYPE_CHECKING:
    from tools.models.tensors import Recognised, Tensor


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


COCO_CLASSES = (  # COCO's 80 detection classes in the order YOLOX, YOLOv5 and v8 number them
    "person",
    "bicycle",
    "car",
    "motorcycle",
    "airplane",
    "bus",
    "train",
    "truck",
    "boat",
    "traffic light",
    "fire hydrant",
    "stop sign",
    "parking meter",
    "bench",
    "bird",
    "cat",
    "dog",
    "horse",
    "sheep",
    "cow",
    "elephant",
    "bear",
    "zebra",
    "giraffe",
    "backpack",
    "umbrella",
    "handbag",
    "tie",
    "suitcase",
    "frisbee",
    "skis",
    "snowboard",
    "sports ball",
    "kite",
    "baseball bat",
    "baseball glove",
    "skateboard",
    "surfboard",
    "tennis racket",
    "bottle",
    "wine glass",
    "cup",
    "fork",
    "knife",
    "spoon",
    "bowl",
    "banana",
    "apple",
    "sandwich",
    "orange",
    "broccoli",
    "carrot",
    "hot dog",
    "pizza",
    "donut",
    "cake",
    "chair",
    "couch",
    "potted plant",
    "bed",
    "dining table",
    "toilet",
    "tv",
    "laptop",
    "mouse",
    "remote",
    "keyboard",
    "cell phone",
    "microwave",
    "oven",
    "toaster",
    "sink",
    "refrigerator",
    "book",
    "clock",
    "vase",
    "scissors",
    "teddy bear",
    "hair drier",
    "toothbrush",
)


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
    """Megvii's YOLOX as its own demo runs it (YOLOX 0.2 and later): letterbox into the top-left corner with grey 114,
    BGR 0..255 as they are, grids over strides 8/16/32, score = objectness x class probability, NMS across classes at
    0.45, detections from 0.3."""
    base.family = "yolox"
    base.summary = f"YOLOX head {out.name!r} {list(out.shape)}: one row per cell, objectness and {classes} class scores"
    four = sum(math.ceil(base.width / s) * math.ceil(base.height / s) for s in (8, 16, 32)) != out.shape[1]
    base.decoder = {"kind": "yolo", "output": out.name, "layout": "yolox", "strides": [8, 16, 32, 64] if four else [8, 16, 32]}
    base.classes, named = class_names(classes, metadata)
    if not named and classes == len(COCO_CLASSES):
        base.classes = list(COCO_CLASSES)
        base.notes.append("80 classes and no names in the model: COCO's, as YOLOX's demo labels them (rename them if yours differ)")
    elif not named:
        base.notes.append("the model carries no class names: rename class_0 ... in postprocess.classes (they label detections.jsonl)")
    base.notes.append("YOLOX exports with decode_in_inference off (raw grid offsets); a head decoded in the graph is layout v5")
    base.notes.append("YOLOX's preprocessing since 0.2: BGR 0..255, no mean or std (exports of older releases took RGB / 255, ImageNet mean/std)")
    base.preprocess.update({"resize_mode": "letterbox", "pad_value": 114, "align": "top_left", "content": "floor"})  # int(w * r), as its preproc
    base.preprocess.update({"color": "bgr", "normalize": {"scale": 1.0}})
    base.thresholds = {"score_threshold": 0.3, "iou_threshold": 0.45, "nms": "class_agnostic", "source": "YOLOX's ONNX demo"}
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


PADDLE_DET_NORMALIZE = {"scale": 1 / 255, "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}  # applied to BGR as it is


def db_text_detector(base: Recognised, out: Tensor, paddle: bool) -> Recognised:
    """A DB text detector (PaddleOCR's): a text probability per pixel -> text regions as boxes (`kind: db`), which a
    recogniser can read as a cascade step. PaddleOCR's own settings where the export is PaddleOCR's."""
    base.family = "text-detector"
    base.summary = f"text detector (DB): {out.name!r} {list(out.shape)}, a text probability per pixel -> one box per text region"
    base.decoder = {"kind": "db", "output": out.name, "threshold": 0.3, "unclip_ratio": 1.5}
    base.classes = ["text"]
    base.thresholds = {"score_threshold": 0.6, "source": "PaddleOCR's det_db_box_thresh: a region's mean text probability, at least"}
    base.notes.append("pixels above 0.3 are text (det_db_thresh), regions grown by 1.5 (det_db_unclip_ratio): PaddleOCR's defaults")
    base.notes.append("read the text of each box with a recogniser as a cascade step: sdk init THIS_MODEL.onnx --cascade RECOGNISER.onnx")
    if paddle:  # PaddleOCR's det configs: BGR as read, x / 255, ImageNet mean and std in that channel order
        base.preprocess.update({"color": "bgr", "normalize": dict(PADDLE_DET_NORMALIZE)})
        base.notes.append("PaddleOCR export: its detector's NormalizeImage (x / 255, ImageNet mean and std) on BGR pixels, as PaddleOCR feeds it")
    else:
        normalize_unknown(base)
    return base


def ctc_recognizer(base: Recognised, out: Tensor, metadata: dict, paddle: bool) -> Recognised:
    """A CTC text recogniser ([N, T, C]: a symbol distribution per step): it reads crops of text lines, so it is a cascade
    step (`kind: ctc`) after a text detector. Its character list comes from the model where it carries one (PaddleOCR)."""
    base.family = "text-recognizer"
    symbols = out.shape[2]
    base.summary = f"text recogniser (CTC): {out.name!r} {list(out.shape)}, {symbols} symbols per step"
    listed = [line for line in (metadata.get("character") or "").split("\n") if line != ""] if metadata.get("character") else []
    if listed and symbols in (len(listed) + 1, len(listed) + 2):
        base.characters = listed
        base.decoder = {"kind": "ctc", "space": symbols == len(listed) + 2}  # index 0 the blank; a last extra symbol is the space
    else:
        base.decoder = {
            "kind": "ctc",
            "characters": placeholder(f"a file of the model's {symbols - 1} symbols, one a line (index 0 is the blank)"),
            "space": placeholder("true where the model's last symbol is a space (PaddleOCR's use_space_char)"),
        }
    height = base.height if isinstance(base.height, int) else (48 if paddle else base.height)
    width = base.width if isinstance(base.width, int) else (320 if paddle else base.width)
    base.width, base.height = width, height  # PaddleOCR's rec_image_shape 3, 48, 320 where the model leaves them open
    base.preprocess.update({"resize_mode": "letterbox", "pad_value": 127})
    if paddle:  # PaddleOCR's recogniser: (x / 255 - 0.5) / 0.5 on BGR
        base.preprocess.update({"color": "bgr", "normalize": {"scale": 1 / 255, "mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5]}})
    else:
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


__all__ = [
    "COCO_CLASSES",
    "class_names",
    "classifier",
    "ctc_recognizer",
    "db_text_detector",
    "final_op",
    "nms_inside",
    "normalize_unknown",
    "segmenter",
    "yolox",
]
