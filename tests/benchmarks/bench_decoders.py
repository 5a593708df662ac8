"""Benchmark: the postprocess stage's cost per frame for each decoder kind, at its model's full candidate count.

Each decoder is timed on a fixed output of its model (real models where the project has one: BlazeFace for SSD and,
with an NMS head appended, nms_inside; PaddleOCR's classifier and text segmenter from rapidocr-onnxruntime), and on
heads of the usual sizes otherwise (YOLOv8 / YOLOX 640 x 640: 8400 rows; YOLOv5 anchor-based 640 x 640: 25200 rows;
80 classes, a few dozen objects). The median over rounds of the mean over calls; one thread, as the runtime calls it.
Also: the example's TF SSD (1917 anchors from the graph), `kind: python` plug-ins (one returning nothing: the contract's
own overhead; one doing BlazeFace's decoding in numpy: compare with the built-in `ssd` row), and the cascade steps'
decoders (`classify`, `ctc`, `ssd`) on real crops, per frame with N crops (the decoder alone, and the whole step:
crops, their preprocessing, one batched ONNX Runtime call, decoding).

    python tests/benchmarks/bench_decoders.py [--calls 200] [--rounds 5] [--smoke]

`--smoke`: 3 calls, one round, and the cascade steps with 2 crops a frame (not 1, 4, 8).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import cv2
import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from sdk.geometry import ResizeGeometry  # noqa: E402
from sdk.postprocess import create_postprocessor  # noqa: E402
from sdk.spec.schema import Postprocess, Resize  # noqa: E402

ASSETS = REPO / "tests" / "integration" / "assets"
COCO = tuple(f"c{i}" for i in range(80))


def blazeface_case(folder: Path, nms: bool):
    import onnxruntime as ort

    from tests.integration.test_blazeface_real_model import one_box_and_one_score_tensor, portrait_frames

    if nms:
        from tests.integration.test_nms_inside_real_model import with_nms_head

        model = with_nms_head(ASSETS / "blazeface_front_128.onnx", folder / "nms.onnx")
    else:
        model = one_box_and_one_score_tensor(ASSETS / "blazeface_front_128.onnx", folder / "bf.onnx")
    frame = portrait_frames(cv2.imread(str(ASSETS / "astronaut_256.jpg")), 4)[3]  # two faces
    canvas = np.zeros((128, 128, 3), np.float32)
    canvas[16:112] = cv2.resize(cv2.cvtColor(frame, cv2.COLOR_BGR2RGB), (128, 96)).astype(np.float32)
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    outputs = dict(zip(names, session.run(None, {"input:0": (canvas / 127.5 - 1)[None]}), strict=True))
    if nms:
        decoder = {"kind": "nms_inside", "boxes": "detection_boxes", "scores": "detection_scores", "classes": "detection_classes"}
        decoder |= {"count": "num_detections", "box_format": "yxyx", "normalized": True, "class_offset": 1}
        return "nms_inside", "BlazeFace + ONNX NMS head (real)", 100, decoder, ["face"], outputs, (128, 128), (320, 240)
    anchors = {"num_layers": 4, "min_scale": 0.1484375, "max_scale": 0.75, "input_size_width": 128, "input_size_height": 128}
    anchors |= {"strides": [8, 16, 16, 16], "aspect_ratios": [1.0], "fixed_anchor_size": True}
    decoder = {"kind": "ssd", "box_encodings": "regressors", "class_logits": "classificators", "anchors": {"generate": anchors}}
    decoder |= {"box_layout": "xywh", "box_size": "linear", "scale_factors": [128] * 4, "keypoints": 6, "background_class": False}
    return "ssd", "BlazeFace, 6 keypoints (real)", 896, decoder, ["face"], outputs, (128, 128), (320, 240)


def paddle_case(folder: Path, segment: bool):
    import onnxruntime as ort

    from tests.integration.real_models import document_frame, pinned, rapidocr_model, text_image

    if segment:
        model = pinned(rapidocr_model("ch_PP-OCRv4_det_infer.onnx"), folder / "det.onnx", [1, 3, 192, 320], [1, 1, 192, 320])
        image = cv2.resize(document_frame(1), (320, 180))
        canvas = np.zeros((192, 320, 3), np.float32)
        canvas[6:186] = image
    else:
        model = pinned(rapidocr_model("ch_ppocr_mobile_v2.0_cls_infer.onnx"), folder / "cls.onnx", [1, 3, 48, 192], [1, 2])
        canvas = cv2.resize(text_image("PERCEPTION", 384, 96, 0), (192, 48)).astype(np.float32)
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    (output,) = session.get_outputs()
    outputs = {output.name: session.run(None, {"x": ((canvas / 255 - 0.5) / 0.5).transpose(2, 0, 1)[None]})[0]}
    if segment:
        decoder = {"kind": "segment", "output": output.name, "threshold": 0.3}
        return (
            "segment",
            "PaddleOCR DBNet text map 320x192 -> 640x360 (real)",
            320 * 192,
            decoder,
            ["background", "text"],
            outputs,
            (320, 192),
            (640, 360),
        )
    decoder = {"kind": "classify", "output": output.name, "activation": "none", "top_k": 2}
    return "classify", "PaddleOCR orientation, 2 classes (real)", 2, decoder, ["0", "180"], outputs, (192, 48), (192, 48)


def made_cases():
    rng = np.random.default_rng(0)
    v8 = rng.uniform(0, 0.05, (1, 84, 8400)).astype(np.float32)
    v8[0, :4] = rng.uniform(0, 640, (4, 8400))
    v8[0, 4:, rng.choice(8400, 40)] = 0.9
    yolox = rng.uniform(0, 0.05, (1, 8400, 85)).astype(np.float32)
    yolox[0, :, :4] = rng.uniform(-1, 1, (8400, 4))
    objects = rng.choice(8400, 40)
    yolox[0, objects, 4] = 0.9
    yolox[0, objects, 5] = 0.9
    v5 = rng.normal(-6, 1, (1, 25200, 85)).astype(np.float32)
    v5[0, :, :4] = rng.normal(0, 1, (25200, 4))
    objects = rng.choice(25200, 60)
    v5[0, objects, 4] = 3.0
    v5[0, objects, 5] = 3.0
    anchors = {8: [[10, 13], [16, 30], [33, 23]], 16: [[30, 61], [62, 45], [59, 119]], 32: [[116, 90], [156, 198], [373, 326]]}
    logits = rng.normal(0, 2, (1, 1000)).astype(np.float32)
    seg = rng.normal(0, 1, (1, 21, 512, 512)).astype(np.float32)
    return [
        ("yolo v8", "8400 x 80 classes (made)", 8400, {"kind": "yolo", "output": "o", "layout": "v8"}, COCO, {"o": v8}, (640, 640), (1280, 720)),
        (
            "yolo yolox",
            "8400 x 80 classes (made)",
            8400,
            {"kind": "yolo", "output": "o", "layout": "yolox"},
            COCO,
            {"o": yolox},
            (640, 640),
            (1280, 720),
        ),
        (
            "yolo v5 + anchors",
            "25200 x 80 classes (made)",
            25200,
            {"kind": "yolo", "output": "o", "layout": "v5", "anchors": anchors},
            COCO,
            {"o": v5},
            (640, 640),
            (1280, 720),
        ),
        (
            "classify",
            "1000 classes, softmax, top 5 (made)",
            1000,
            {"kind": "classify", "output": "o"},
            tuple(f"k{i}" for i in range(1000)),
            {"o": logits},
            (224, 224),
            (1280, 720),
        ),
        (
            "segment",
            "21 classes 512x512 -> 1280x720 (made)",
            512 * 512,
            {"kind": "segment", "output": "o"},
            tuple(f"s{i}" for i in range(21)),
            {"o": seg},
            (512, 512),
            (1280, 720),
        ),
    ]


def example_ssd_case(folder: Path):
    """The example pipeline's SSDLite pedestrian detector (TF Object Detection API): its box and class heads read from
    the original graph on a vtest.avi frame, the 1917 anchors from the graph's own constant (as preparation reads them)."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper

    from tools.models.prepare import _constant_tensor

    source = REPO / "pipelines" / "assets" / "ssdlite_pedestrian.onnx"
    model = onnx.load(str(source))
    anchors = _constant_tensor(model, "Postprocessor/ExpandDims:0", source)
    model.graph.output.extend([helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("concat:0", "concat_1:0")])
    onnx.save(model, str(folder / "ssdlite_heads.onnx"))
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(str(folder / "ssdlite_heads.onnx"), options, providers=["CPUExecutionProvider"])
    capture = cv2.VideoCapture(str(REPO / "pipelines" / "assets" / "vtest.avi"))
    ok, frame = capture.read()
    capture.release()
    boxes, logits = session.run(["concat:0", "concat_1:0"], {"image_tensor:0": cv2.cvtColor(frame, cv2.COLOR_BGR2RGB)[None]})
    decoder = {"kind": "ssd", "box_encodings": "concat:0", "class_logits": "concat_1:0", "anchors": "anchors"}
    outputs = {"concat:0": boxes, "concat_1:0": logits}
    return (
        "ssd",
        "example SSDLite pedestrian 300 x 300, graph anchors (real)",
        1917,
        decoder,
        ["person"],
        outputs,
        (300, 300),
        (768, 576),
        {"anchors": anchors},
    )


PLUGIN = """\
import numpy as np


def empty(outputs, geometry, options):
    return {"boxes": np.zeros((0, 4), np.float32), "scores": np.zeros(0, np.float32), "class_ids": np.zeros(0, np.int32)}


_ANCHORS = {}


def blazeface(outputs, geometry, options):
    # MediaPipe's decoding of BlazeFace (fixed-size anchors on a 16 x 16 and an 8 x 8 grid), vectorised numpy.
    if not _ANCHORS:
        grid = []
        for cells, per in ((16, 2), (8, 6)):
            ys, xs = np.meshgrid(np.arange(cells), np.arange(cells), indexing="ij")
            centres = np.stack([(xs + 0.5) / cells, (ys + 0.5) / cells], axis=-1).reshape(-1, 1, 2)
            grid.append(np.repeat(centres, per, axis=1).reshape(-1, 2))
        _ANCHORS["a"] = np.concatenate(grid).astype(np.float32)
    anchors = _ANCHORS["a"]
    raw = outputs["regressors"][0]
    logits = outputs["classificators"][0, :, 0]
    keep = np.nonzero(logits > 0.0)[0]
    r, a = raw[keep] / 128.0, anchors[keep]
    cx, cy = r[:, 0] + a[:, 0], r[:, 1] + a[:, 1]
    boxes = np.stack([cx - r[:, 2] / 2, cy - r[:, 3] / 2, cx + r[:, 2] / 2, cy + r[:, 3] / 2], axis=1) * 128.0
    points = (r[:, 4:16].reshape(-1, 6, 2) + a[:, None, :]) * 128.0
    scores = 1.0 / (1.0 + np.exp(-logits[keep]))
    return {"boxes": boxes, "scores": scores, "class_ids": np.zeros(len(keep), np.int32), "keypoints": points}
"""


def plugin_cases(folder: Path, blazeface):
    """`kind: python` on BlazeFace's real outputs: a plug-in that returns nothing (the contract's cost: read-only views,
    the checks of what comes back) and one doing the built-in `ssd` decoder's work in numpy."""
    plugins = folder / "plugins"
    plugins.mkdir(exist_ok=True)
    (plugins / "bench_plugins.py").write_text(PLUGIN)
    outputs = blazeface[5]
    empty = {"kind": "python", "entry": "bench_plugins:empty", "path": "plugins"}
    decode = {"kind": "python", "entry": "bench_plugins:blazeface", "path": "plugins"}
    extra = {"plugin_folder": plugins}
    return [
        ("python (returns nothing)", "BlazeFace outputs (real)", 896, empty, ["face"], outputs, (128, 128), (320, 240), {}, extra),
        ("python (BlazeFace decode)", "BlazeFace outputs, 6 keypoints (real)", 896, decode, ["face"], outputs, (128, 128), (320, 240), {}, extra),
    ]


def time_calls(call, calls: int, rounds: int) -> float:
    """ms per call: the median over rounds of the mean over calls, after one warm-up call."""
    call()
    means = []
    for _ in range(rounds):
        started = time.perf_counter()
        for _ in range(calls):
            call()
        means.append((time.perf_counter() - started) / calls)
    return statistics.median(means) * 1000


def cascade_steps(folder: Path):
    """(decoder, what, step spec, its folder, frame, parent box) for each cascade decoder, on the tests' real pipelines:
    BlazeFace on a person crop (tests/sdk/cascade/test_cascade_ssd.py), PaddleOCR's recogniser and its orientation
    classifier on a text line (tests/sdk/cascade/test_cascade.py; rapidocr-onnxruntime, the test extra)."""
    from sdk.spec.cascade import ClassifyDecoder
    from sdk.spec.loader import load_pipeline
    from tests.sdk.cascade.test_cascade_ssd import cascade_folder

    found = []
    people, frames = cascade_folder(folder / "ssd")
    face = load_pipeline(people / "people.yaml").spec.cascade[0]
    found.append(("ssd", "BlazeFace 128 x 128 on a person crop, 896 anchors, 6 keypoints", face, people, frames[2], (171, 178, 383, 480)))
    try:
        from tests.integration.real_models import rapidocr_model
        from tests.sdk.cascade.test_cascade import frames as text_frames
        from tests.sdk.cascade.test_cascade import ocr_folder

        ocr = ocr_folder(folder / "ctc")
    except BaseException:  # pytest.skip (not an Exception) when rapidocr-onnxruntime is missing
        print("rapidocr-onnxruntime is not installed (the test extra): the ctc and classify cascade rows are left out")
        return found
    text = load_pipeline(ocr / "ocr.yaml").spec.cascade[0]
    line = (30, 60, 460, 115)  # the first rendered line of text
    found.append(("ctc", "PaddleOCR v4 recogniser 320 x 48, 40 steps x 6625 symbols", text, ocr, text_frames()[0], line))
    (ocr / "cls.onnx").write_bytes(rapidocr_model("ch_ppocr_mobile_v2.0_cls_infer.onnx").read_bytes())  # batch and width free
    orientation = text.model_copy(
        update={
            "name": "orientation",
            "model": text.model.model_copy(update={"path": "cls.onnx"}),
            "preprocess": text.preprocess.model_copy(update={"resize": text.preprocess.resize.model_copy(update={"width": 192})}),
            "decoder": ClassifyDecoder(kind="classify", labels=("0", "180"), activation="none", top_k=2),
        }
    )
    found.append(("classify", "PaddleOCR orientation 192 x 48, 2 classes", orientation, ocr, text_frames()[0], line))
    return found


CROPS = (1, 4, 8)


def time_cascade(
    spec, folder: Path, frame: np.ndarray, box, crops: int, calls: int, rounds: int, counts: tuple[int, ...] = CROPS
) -> tuple[float, float]:
    """(decoder ms, whole step ms) per frame with `crops` parent detections (all on `box`), the crops as one batch;
    the step takes up to max(counts) crops a frame."""
    from sdk.cascade import CascadeStage, crop_rect
    from sdk.postprocess.detections import Detections

    spec = spec.model_copy(update={"takes": spec.takes.model_copy(update={"classes": (), "min_score": 0.0, "max_per_frame": max(counts)})})
    stage = CascadeStage((spec,), folder)
    step = stage.steps[0]
    detections = Detections(crops, ("object",))
    detections.boxes[:crops] = box
    detections.scores[:crops] = 0.9
    detections.count = crops
    results = [{} for _ in range(crops)]
    whole = time_calls(lambda: step(frame, detections, results), calls, rounds)
    # The decoder alone, on that batch's outputs.
    rect = crop_rect(list(box), spec.crop, frame.shape[1], frame.shape[0])
    crops_used = [(rect, step.preprocessors[k](np.ascontiguousarray(frame[rect[1] : rect[3], rect[0] : rect[2]]))) for k in range(crops)]
    assert step.batched, f"{spec.model.path}: the batch axis should be free"
    outputs = step.session.run(step.fetch, {step.input: step.buffer[:crops]})

    def decode():
        return step.decoder(outputs[0]) if step.fetch is None else step.decoder(outputs, crops_used)

    ms = time_calls(decode, calls, rounds)
    stage.close()
    return ms, whole


def time_case(case, calls: int, rounds: int) -> float:
    kind, _, _, decoder, classes, outputs, net, source = case[:8]
    tensors = case[8] if len(case) > 8 else {}
    extra = case[9] if len(case) > 9 else {}
    spec = Postprocess.model_validate({"decoder": decoder, "classes": list(classes), "score_threshold": 0.3 if kind != "classify" else 0.0})
    post = create_postprocessor(spec, outputs, net, tensors, **extra)
    geometry = ResizeGeometry.plan(source[0], source[1], Resize(width=net[0], height=net[1], mode="letterbox"))
    return time_calls(lambda: post(geometry), calls, rounds)  # first call: lazily imported modules, first-size allocations


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--smoke", action="store_true", help="a few calls, one round: proves the script runs (CI); its numbers mean nothing")
    args = parser.parse_args()
    calls, rounds = (3, 1) if args.smoke else (args.calls, args.rounds)
    cv2.setNumThreads(1)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        print(f"load average at start: {', '.join(f'{v:.1f}' for v in os.getloadavg())} ({os.cpu_count()} CPUs)")
        blazeface = blazeface_case(folder, nms=False)
        cases = [example_ssd_case(folder), blazeface, blazeface_case(folder, nms=True), *plugin_cases(folder, blazeface)]
        try:
            cases += [paddle_case(folder, segment=False), paddle_case(folder, segment=True)]
        except ImportError:
            print("rapidocr-onnxruntime is not installed (the test extra): the PaddleOCR rows are left out")
        cases += made_cases()
        print("| decoder | model, output | candidates | postprocess ms/frame |")
        print("| --- | --- | --- | --- |")
        for case in cases:
            ms = time_case(case, calls, rounds)
            print(f"| {case[0]} | {case[1]} | {case[2]} | {ms:.3f} |", flush=True)
        print()
        print("| cascade decoder | step model | crops a frame | decoder ms/frame | decoder ms/crop | whole step ms/frame |")
        print("| --- | --- | --- | --- | --- | --- |")
        counts = (2,) if args.smoke else CROPS  # smoke: one batch of two crops (the batched step's path; one crop is n = 1 of it)
        for kind, what, spec, step_folder, frame, box in cascade_steps(folder):
            for crops in counts:
                decode, whole = time_cascade(spec, step_folder, frame, box, crops, max(1, calls // 10), rounds, counts)
                print(f"| {kind} | {what} | {crops} | {decode:.3f} | {decode / crops:.3f} | {whole:.2f} |", flush=True)
        print(f"load average at end: {', '.join(f'{v:.1f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
