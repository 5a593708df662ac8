"""What an ONNX model is, from its inputs' and outputs' shapes and names: the facts `sdk init` writes a pipeline from.

Recognised: a TF Object Detection API SSD (anchor tensor in the graph, cut before its NMS), an SSD head without
anchors (MediaPipe/BlazeFace style: boxes [1, N, 4 + 2K] and scores [1, N, C]), YOLO v5 (anchor-based,
[1, 3 x cells, 5 + C]), YOLO v8 ([1, 4 + C, cells]), YOLOX ([1, cells, 5 + C]), models that end in their own
NMS, classifiers ([1, C]) and segmenters ([1, C, h, w]). "cells" is the sum over strides 8, 16, 32 (and 64)
of the feature map sizes of the input. What the shapes cannot tell is returned as a FILL-IN placeholder with
the reason (sdk.spec.placeholders refuses a file that still holds one).
"""

from __future__ import annotations

import math
from pathlib import Path

from sdk.errors import ModelError
from sdk.spec.placeholders import placeholder
from tools.models.family_decoders import (
    class_names,
    classifier,
    ctc_recognizer,
    db_text_detector,
    final_op,
    nms_inside,
    normalize_unknown,
    segmenter,
    yolox,
)
from tools.models.tensors import Recognised, Tensor

_ELEM = {1: "float32", 2: "uint8", 3: "int8", 6: "int32", 7: "int64", 10: "float16", 11: "float64"}
TF_CORE_SIZES = (300, 320, 256, 384, 512, 640)  # TF OD API SSD image_resizer sizes, most common first
NMS_NAMES = ("num_detections", "num_dets", "detection_boxes", "det_boxes", "nmsed_boxes", "selected_indices")


def _tensor(value_info) -> Tensor:
    kind = value_info.type.tensor_type
    dims = tuple(d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else (d.dim_param or "?") for d in kind.shape.dim)
    return Tensor(value_info.name, dims, _ELEM.get(kind.elem_type, f"onnx type {kind.elem_type}"))


def recognise(model_path: Path) -> Recognised:
    import onnx

    try:
        model = onnx.load(str(model_path))
    except Exception as exc:  # onnx raises DecodeError, OSError, ...
        raise ModelError(f"{model_path}: not a readable ONNX model: {exc}", hint="give the path of an .onnx file") from None
    graph = model.graph
    initializers = {i.name: tuple(i.dims) for i in graph.initializer}
    inputs = [_tensor(i) for i in graph.input if i.name not in initializers]
    outputs = [_tensor(o) for o in graph.output]
    produced = {o for n in graph.node for o in n.output}
    metadata = {p.key: p.value for p in model.metadata_props}
    ops = {n.op_type for n in graph.node}
    made_by = {o: n for n in graph.node for o in n.output}
    if {"concat:0", "concat_1:0", "Preprocessor/sub:0"} <= produced:
        anchors = [n for n, s in initializers.items() if "Postprocessor" in n and len(s) in (2, 3) and s[-1] == 4 and math.prod(s) > 4]
        if anchors:
            return _tf_ssd(model_path, model, anchors[0], initializers[anchors[0]], inputs, outputs)
    image, extras = _image_input(model_path, inputs)
    layout = "nchw" if image.shape[1] in (1, 3) else "nhwc"
    height, width = (image.shape[2], image.shape[3]) if layout == "nchw" else (image.shape[1], image.shape[2])
    base = Recognised("unknown", "", image, layout, width, height, extras, outputs=outputs)
    base.preprocess = {"color": "rgb" if image.shape[1 if layout == "nchw" else 3] == 3 else "gray"}
    names = " ".join(o.name.lower() for o in outputs)
    if ops & {"NonMaxSuppression", "EfficientNMS_TRT", "BatchedNMSDynamic_TRT"} or any(n in names for n in NMS_NAMES):
        return nms_inside(
            base, f"ends in its own NMS ({', '.join(sorted(ops & {'NonMaxSuppression', 'EfficientNMS_TRT'})) or 'by its output names'})", outputs
        )
    cells = _cells(width, height)
    if len(outputs) == 1 and len(outputs[0].shape) == 3 and isinstance(width, int) and isinstance(height, int):
        (out,) = outputs
        _, a, b = out.shape
        if isinstance(a, int) and isinstance(b, int):
            if b in cells and a > 4:
                return _yolo(base, out, "v8", a - 4, metadata)
            if any(a == 3 * c for c in cells) and b > 5:
                return _yolo(base, out, "v5", b - 5, metadata)
            if a in cells and b > 5:
                return yolox(base, out, b - 5, metadata)
    ssd = _ssd_pair(outputs)
    if ssd is not None:
        return _generated_ssd(base, *ssd)
    if len(outputs) == 1:
        (out,) = outputs
        shape, what = out.shape, f"{out.name!r} {list(out.shape)}"
        if isinstance(shape[1] if len(shape) > 1 else None, int) and (len(shape) == 2 or (len(shape) == 4 and shape[2:] == (1, 1))):
            return classifier(base, out, f"classifier: {what} scores {shape[1]} classes", final_op(out.name, made_by))
        last = final_op(out.name, made_by)
        if len(shape) == 4 and shape[1] == 1 and last == "Sigmoid" and _text_map(model, image, out):
            return db_text_detector(base, out, _paddle(model))
        if len(shape) == 4 and isinstance(shape[1], int) and all(not isinstance(d, int) or d >= 8 for d in shape[2:]):
            return segmenter(base, out, f"segmenter: {what}, {shape[1]} class(es) per pixel", final_op(out.name, made_by))
        if len(shape) == 3 and isinstance(shape[2], int) and shape[2] > 10:
            return ctc_recognizer(base, out, metadata, _paddle(model))
    split = [o for o in outputs if len(o.shape) == 3 and isinstance(o.shape[-1], int) and o.shape[-1] >= 4 and (o.shape[-1] - 4) % 2 == 0]
    if len(split) >= 2 and len(outputs) == 2 * len(split):
        raise ModelError(
            f"{model_path}: an SSD head split over {len(split)} grids (boxes {', '.join(repr(o.name) for o in split)}); "
            "the ssd decoder reads one box tensor and one score tensor",
            hint="join the grids with a Concat node along the anchor axis, boxes and scores each, in the anchors' order (onnx.helper), "
            "and run `sdk init` on the joined model",
        )
    return _other(base, "unknown", "no family recognised from the outputs", outputs)


def _paddle(model) -> bool:
    """A PaddlePaddle export (paddle2onnx names dynamic axes `p2o.DynamicDimension.N` and tensors `NAME_N.tmp_M`)."""
    values = [*model.graph.input, *model.graph.output]
    dims = [d.dim_param for v in values for d in v.type.tensor_type.shape.dim]
    return any(d.startswith("p2o.") for d in dims) or any(".tmp_" in v.name for v in model.graph.output)


def _text_map(model, image: Tensor, out: Tensor) -> bool:
    """A one-channel probability map at the input's resolution from a text detector: a PaddleOCR export, or one whose
    names say text or DB (a one-channel foreground segmenter is not taken for one)."""
    same_size = all(not (isinstance(a, int) and isinstance(b, int)) or a == b for a, b in zip(out.shape[2:], image.shape[2:], strict=False))
    words = f"{out.name} {model.graph.name}".lower()
    return same_size and (_paddle(model) or any(w in words for w in ("text", "db", "det")))


def _image_input(model_path: Path, inputs: list[Tensor]) -> tuple[Tensor, list[Tensor]]:
    images = [t for t in inputs if len(t.shape) == 4 and (t.shape[1] in (1, 3) or t.shape[3] in (1, 3))]
    if not images:
        shapes = ", ".join(f"{t.name} {list(t.shape)}" for t in inputs) or "none"
        raise ModelError(
            f"{model_path}: no image input (a 4-D tensor with 1 or 3 channels, NCHW or NHWC); inputs: {shapes}",
            hint="sdk init writes pipelines for image models",
        )
    image = images[0]
    return image, [t for t in inputs if t is not image]


def _cells(width, height) -> set[int]:
    if not (isinstance(width, int) and isinstance(height, int)):
        return set()
    per = [math.ceil(width / s) * math.ceil(height / s) for s in (8, 16, 32, 64)]
    return {sum(per[:3]), sum(per)}


def _yolo(base: Recognised, out: Tensor, layout: str, classes: int, metadata: dict) -> Recognised:
    base.family = f"yolo-{layout}"
    base.summary = f"YOLO {layout} head {out.name!r} {list(out.shape)}: {classes} classes"
    base.decoder = {"kind": "yolo", "output": out.name, "layout": layout}
    base.classes, named = class_names(classes, metadata)
    if not named:
        base.notes.append("the model carries no class names: rename class_0 ... in postprocess.classes (they label detections.jsonl)")
    ultralytics = "ultralytics" in (metadata.get("author", "") + metadata.get("description", "")).lower() or "stride" in metadata
    normalize = (
        {"scale": 1 / 255}
        if ultralytics
        else placeholder(
            "how the model expects its pixels; Ultralytics-trained YOLOs take RGB x / 255 ({scale: 0.00392156862745098}), others may differ"
        )
    )
    base.preprocess.update({"resize_mode": "letterbox", "pad_value": 114, "normalize": normalize})
    if ultralytics:
        base.notes.append("Ultralytics export (metadata): letterbox with grey 114, RGB, x / 255, as its own predictor")
    # Ultralytics' predictors: conf 0.25; IoU 0.45 in YOLOv5's detect.py, 0.7 in YOLOv8's predict.
    base.thresholds = {"score_threshold": 0.25, "iou_threshold": 0.7 if layout == "v8" else 0.45, "source": f"Ultralytics' YOLO{layout} predictor"}
    return base


def _ssd_pair(outputs: list[Tensor]) -> tuple[Tensor, Tensor] | None:
    if len(outputs) != 2 or not all(o.static and len(o.shape) >= 3 for o in outputs):
        return None
    boxes = [o for o in outputs if o.shape[-1] >= 4 and (o.shape[-1] - 4) % 2 == 0]
    for box in boxes:
        (score,) = [o for o in outputs if o is not box]
        if math.prod(box.shape[:-1]) == math.prod(score.shape[:-1]) and (score.shape[-1] < box.shape[-1] or score.shape[-1] != 4):
            return box, score
    return None


def _generated_ssd(base: Recognised, box: Tensor, score: Tensor) -> Recognised:
    anchors, keypoints, classes = math.prod(box.shape[:-1]), (box.shape[-1] - 4) // 2, score.shape[-1]
    base.family = "ssd"
    base.summary = f"SSD head without an anchor tensor: {box.name!r} {list(box.shape)} ({keypoints} keypoints), {score.name!r} {list(score.shape)}"
    why = "the graph holds no anchors: copy the model's SsdAnchorsCalculator options (MediaPipe graph config)"
    base.decoder = {
        "kind": "ssd",
        "box_encodings": box.name,
        "class_logits": score.name,
        "anchors": {
            "generate": {
                "num_layers": placeholder(f"{why}"),
                "min_scale": placeholder(f"{why}"),
                "max_scale": placeholder(f"{why}"),
                "input_size_width": base.width,
                "input_size_height": base.height,
                "strides": placeholder(f"{why}; they must generate {anchors} anchors"),
                "aspect_ratios": [1.0],
                "fixed_anchor_size": placeholder(f"{why} (true for BlazeFace)"),
            }
        },
        "box_layout": placeholder("the order of a box row: xywh (MediaPipe, reverse_output_order: true) or yxhw (TF)"),
        "box_size": placeholder("linear (MediaPipe, no apply_exponential_on_box_size) or exp (TF box coder)"),
        "scale_factors": placeholder(
            f"scale_factors: x_scale, y_scale, w_scale, h_scale of the model's TensorsToDetectionsCalculator ({base.width} each for BlazeFace)"
        ),
        "keypoints": keypoints,
        "background_class": classes > 1,
    }
    base.classes = [f"class_{i}" for i in range(classes - (1 if classes > 1 else 0))]
    base.notes.append("rename class_0 ... in postprocess.classes (they label detections.jsonl)")
    if keypoints:  # boxes with landmarks: a face (or hand, pose) detector of MediaPipe's kind
        base.thresholds = {
            "score_threshold": 0.5,
            "iou_threshold": 0.3,
            "source": "MediaPipe's face detection graphs (min_score_thresh 0.5, min_suppression_threshold 0.3)",
        }
    base.preprocess.update(
        {
            "resize_mode": "letterbox",
            "pad_value": 0,
            "normalize": placeholder(
                "MediaPipe detectors take x / 127.5 - 1 ({scale: 0.00784313725490196, mean: [1.0, 1.0, 1.0]}); check the model card"
            ),
        }
    )
    return base


def _tf_ssd(model_path: Path, model, anchor_name: str, anchor_shape: tuple, inputs: list[Tensor], outputs: list[Tensor]) -> Recognised:
    """A TF Object Detection API export: cut between its preprocessing (which the SDK does) and its Loop/NMS (which DLA cannot take)."""
    import onnx
    from onnx import numpy_helper

    from tools.models.prepare import _cut

    count = math.prod(anchor_shape[:-1])
    for size in TF_CORE_SIZES:
        try:
            core = _cut(onnx.load(str(model_path)), {"Preprocessor/sub:0": (1, 3, size, size)}, ("concat:0", "concat_1:0"), True, model_path)
        except ModelError:
            continue
        shapes = [tuple(d.dim_value for d in o.type.tensor_type.shape.dim) for o in core.graph.output]
        if math.prod(shapes[0][:-1]) == count:
            break
    else:
        raise ModelError(
            f"{model_path}: a TF Object Detection API SSD whose core makes {count} anchors at none of the sizes {list(TF_CORE_SIZES)}",
            hint="write the pipeline by hand from pipelines/pedestrian.yaml (model.prepare.inputs takes the size of the image_resizer)",
        )
    classes = shapes[1][-1] - 1
    values = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    nodes = {n.name: n for n in model.graph.node}
    scale = mean = None
    mul, sub = nodes.get("Preprocessor/mul"), nodes.get("Preprocessor/sub")
    if mul is not None and sub is not None:
        scale = next((float(values[i].reshape(-1)[0]) for i in mul.input if i in values and values[i].size == 1), None)
        mean = next((float(values[i].reshape(-1)[0]) for i in sub.input if i in values and values[i].size == 1), None)
    image = Tensor("Preprocessor/sub:0", (1, 3, size, size), "float32")  # the core's input: the SDK does the graph's preprocessing
    base = Recognised("ssd-tf", "", image, "nchw", size, size)
    if inputs:
        base.notes.append(f"the graph's own input {inputs[0].name!r} {list(inputs[0].shape)} {inputs[0].dtype} and its preprocessing are cut away")
    base.summary = (
        f"TF Object Detection API SSD: {count} anchors in {anchor_name!r}, core 'Preprocessor/sub:0' [1, 3, {size}, {size}] -> "
        f"'concat:0' {list(shapes[0])}, 'concat_1:0' {list(shapes[1])} ({classes} classes and background); its own NMS is cut away"
    )
    base.prepare = {"inputs": {"Preprocessor/sub:0": [1, 3, size, size]}, "outputs": ["concat:0", "concat_1:0"]}
    base.decoder = {
        "kind": "ssd",
        "box_encodings": "concat:0",
        "class_logits": "concat_1:0",
        "anchors": anchor_name,
        "anchor_layout": "yxyx",
        "scale_factors": [10.0, 10.0, 5.0, 5.0],
        "score_activation": "sigmoid",
        "background_class": True,
    }
    normalize = (  # TF OD API multiplies 0..255 pixels by Preprocessor/mul's constant and subtracts Preprocessor/sub's
        {"scale": _short(scale), "mean": [_short(mean)] * 3}
        if scale is not None and mean is not None
        else placeholder("the graph's Preprocessor (x * scale - mean) was not found; TF SSD MobileNets take x * 2/255 - 1")
    )
    base.preprocess = {"resize_mode": "stretch", "coordinates": "asymmetric", "color": "rgb", "normalize": normalize}
    base.thresholds = {"score_threshold": 0.3, "iou_threshold": 0.6, "source": "the TF Object Detection API's usual IoU; a score to start from"}
    base.classes = [f"class_{i}" for i in range(classes)]
    base.notes += [
        "box coder scales [10, 10, 5, 5] are the TF OD API default (faster_rcnn_box_coder in pipeline.config): check yours",
        "rename class_0 ... in postprocess.classes from the model's label map",
    ]
    return base


def _short(value: float) -> float:
    """A float32 constant as the shortest decimal that reads back to it (0.007843138, not 0.007843137718737125)."""
    import numpy as np

    return float(np.format_float_positional(np.float32(value), unique=True))


def _other(base: Recognised, family: str, summary: str, outputs: list[Tensor]) -> Recognised:
    """A family no built-in decoder kind covers (a CTC text recogniser, an unknown head): a `kind: python` plug-in, its entry a placeholder."""
    base.family, base.summary = family, summary
    listing = ", ".join(f"{o.name} {list(o.shape)}" for o in outputs)
    base.decoder = {
        "kind": "python",
        "entry": placeholder(f"this SDK has no built-in decoder for this family ({family}); name a plug-in that decodes {listing}"),
    }
    base.classes = ["class_0"]
    base.notes.append("docs/guides/decoder-plugins.md describes the plug-in's contract")
    normalize_unknown(base)
    return base


__all__ = ["Recognised", "Tensor", "recognise"]
