"""Benchmark: the postprocess stage's cost per frame for each decoder kind, at its model's full candidate count.

Each decoder is timed on a fixed output of its model (real models where the project has one: BlazeFace for SSD and,
with an NMS head appended, nms_inside; PaddleOCR's classifier and text segmenter from rapidocr-onnxruntime), and on
heads of the usual sizes otherwise (YOLOv8 / YOLOX 640 x 640: 8400 rows; YOLOv5 anchor-based 640 x 640: 25200 rows;
80 classes, a few dozen objects). The median over rounds of the mean over calls; one thread, as the runtime calls it.

    python tests/benchmarks/bench_decoders.py [--calls 200] [--rounds 5] [--smoke]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import cv2
import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from sdk.postprocess import create_postprocessor  # noqa: E402
from sdk.preprocess.geometry import ResizeGeometry  # noqa: E402
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


def time_case(case, calls: int, rounds: int) -> float:
    kind, _, _, decoder, classes, outputs, net, source = case
    spec = Postprocess.model_validate({"decoder": decoder, "classes": list(classes), "score_threshold": 0.3 if kind != "classify" else 0.0})
    post = create_postprocessor(spec, outputs, net, {})
    geometry = ResizeGeometry.plan(source[0], source[1], Resize(width=net[0], height=net[1], mode="letterbox"))
    post(geometry)  # first call: lazily imported modules, first-size allocations
    means = []
    for _ in range(rounds):
        started = time.perf_counter()
        for _ in range(calls):
            post(geometry)
        means.append((time.perf_counter() - started) / calls)
    return statistics.median(means) * 1000


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
        cases = [blazeface_case(folder, nms=False), blazeface_case(folder, nms=True)]
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


if __name__ == "__main__":
    main()
