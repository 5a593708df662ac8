"""`sdk init MODEL.onnx`: the family recognised from the model's tensors, a commented file that validates (after the
documented edits where the model cannot tell a value) and runs with `deploy --target local`, on the real models the
repository has (the example's TF SSD, BlazeFace, PaddleOCR's classifier, detector and recogniser from rapidocr)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import cv2
import numpy as np
import onnx
import onnxruntime as ort
import pytest
import yaml
from onnx import TensorProto, helper

from sdk.errors import ConfigError
from sdk.spec.loader import load_pipeline
from tests.integration.mediapipe_reference import REPO, compare, reference_anchors
from tests.integration.test_blazeface_real_model import ASSETS, NAMES, one_box_and_one_score_tensor, portrait_frames
from tools.cli import run

EXAMPLE = REPO / "pipelines"


def in_process(capfd, monkeypatch, args: list[str], cwd: Path, env: dict) -> SimpleNamespace:
    """The CLI in this process, in `cwd` with `env` set (a subprocess would cost its imports; these tests check the
    exit code, the words and the files, not the process boundary)."""
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(cwd)
    capfd.readouterr()
    try:
        code = run(args)
    except SystemExit as exc:  # argparse's usage errors
        code = exc.code
    out, err = capfd.readouterr()
    return SimpleNamespace(returncode=code, stdout=out, stderr=err)


@pytest.fixture()
def sdk(capfd, monkeypatch):
    def call(*args: str, cwd: Path) -> SimpleNamespace:
        return in_process(capfd, monkeypatch, list(args), cwd, {"COLUMNS": "400", "SDK_STATE_DIR": str(cwd / ".state")})

    return call


@pytest.fixture()
def deploy_local(capfd, monkeypatch):
    """`deploy --target local PIPELINE --frames N` through the CLI (in this process); detections.jsonl's lines."""

    def call(pipeline: Path, frames: int, state: Path, reports: Path) -> list[dict]:
        args = ["deploy", "--target", "local", str(pipeline), "--frames", str(frames), "--report-dir", str(reports)]
        done = in_process(capfd, monkeypatch, args, REPO, {"SDK_STATE_DIR": str(state), "COLUMNS": "200"})
        # PASS, FAIL (a measurement of the budgets that `sdk init` writes) or INCONCLUSIVE (too few frames): never an error
        assert done.returncode in (0, 3, 4), done.stdout + done.stderr
        return [json.loads(line) for line in (reports / "detections.jsonl").read_text().splitlines()]

    return call


@pytest.fixture()
def run_written(monkeypatch):
    """The written file run by the device's pipeline runner in this process, on the model `sdk init` pointed it to as
    the host prepares it for a release; detections.jsonl's lines. For the tests whose subject is what the model finds
    once the file is filled in: the deploy path around the runner (staging, lock, trial, health check, the runtime
    process) is what test_the_example_tf_ssd_gets_the_example_pipeline_and_runs takes through `deploy --target local`
    (a video file as the source), test_still_and_short_sources through the real `sdk-deploy` process (an `sdk init` file
    of a YOLO v8 head) and tests/integration/test_blazeface_real_model.py through `deploy --target local` with a folder
    of images (the same BlazeFace model and edits)."""
    from sdk.runtime.runner import PipelineRunner
    from tools.models.prepare import PrepareModel

    def call(path: Path, frames: int, state: Path, reports: Path) -> list[dict]:
        monkeypatch.setenv("SDK_STATE_DIR", str(state))
        pipeline = load_pipeline(path)
        artifacts = PrepareModel(pipeline, state / "cache")()
        PipelineRunner(pipeline, artifacts, reports, max_frames=frames).run()
        return [json.loads(line) for line in (reports / "detections.jsonl").read_text().splitlines()]

    return call


def edit(path: Path, changes: dict) -> None:
    """The documented edits: each dotted key set to its value (the comments are not kept, the values are)."""
    data = yaml.safe_load(path.read_text())
    for dotted, value in changes.items():
        node, keys = data, dotted.split(".")
        for key in keys[:-1]:
            node = node[key]
        node[keys[-1]] = value
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def normalised(spec, pixels: np.ndarray) -> np.ndarray:
    n = spec.preprocess.normalize
    return (pixels * n.scale - np.asarray(n.mean)) / np.asarray(n.std)


@pytest.mark.slow
def test_the_example_tf_ssd_gets_the_example_pipeline_and_runs(tmp_path, sdk, deploy_local):
    for name in ("ssdlite_pedestrian.onnx", "vtest.avi"):
        shutil.copy(EXAMPLE / "assets" / name, tmp_path / name)
    done = sdk("init", "ssdlite_pedestrian.onnx", "--source", "file://vtest.avi", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "TF Object Detection API SSD: 1917 anchors" in done.stdout and "fill in" not in done.stdout
    written = load_pipeline(tmp_path / "ssdlite_pedestrian.yaml").spec  # validates as written
    example = load_pipeline(EXAMPLE / "pedestrian.yaml").spec
    assert written.model.prepare == example.model.prepare
    assert written.postprocess.decoder == example.postprocess.decoder
    assert written.preprocess.resize == example.preprocess.resize and written.preprocess.layout == example.preprocess.layout
    pixels = np.arange(256.0)[:, None]  # the same network input for every pixel value (x * 2/255 - 1 written two ways)
    assert np.allclose(normalised(written, pixels), normalised(example, pixels), atol=1e-6)
    lines = deploy_local(tmp_path / "ssdlite_pedestrian.yaml", 8, tmp_path / "state", tmp_path / "reports")
    assert [line["frame"] for line in lines] == list(range(8)) and all(line["detections"] for line in lines)
    again = sdk("init", "ssdlite_pedestrian.onnx", cwd=tmp_path)
    assert again.returncode == 1 and "exists; sdk init never overwrites a file" in again.stderr and "Traceback" not in again.stderr


BLAZEFACE_EDITS = {  # face_detection_short_range.pbtxt, as docs/getting-started.md tells a user to copy them
    "preprocess.normalize": {"scale": 0.00784313725490196, "mean": [1.0, 1.0, 1.0]},
    "postprocess.decoder.anchors.generate.num_layers": 4,
    "postprocess.decoder.anchors.generate.min_scale": 0.1484375,
    "postprocess.decoder.anchors.generate.max_scale": 0.75,
    "postprocess.decoder.anchors.generate.strides": [8, 16, 16, 16],
    "postprocess.decoder.anchors.generate.fixed_anchor_size": True,
    "postprocess.decoder.box_layout": "xywh",
    "postprocess.decoder.box_size": "linear",
    "postprocess.decoder.scale_factors": [128, 128, 128, 128],
}


@pytest.mark.slow
def test_blazeface_names_what_to_fill_in_and_runs_once_it_is(tmp_path, sdk, run_written):
    model = one_box_and_one_score_tensor(ASSETS / "blazeface_front_128.onnx", tmp_path / "blazeface.onnx")
    done = sdk("init", model.name, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    listed = [line.split(":")[0].strip() for line in done.stdout.splitlines() if line.startswith("  ")]
    assert listed == list(BLAZEFACE_EDITS), done.stdout
    pipeline = tmp_path / "blazeface.yaml"
    with pytest.raises(ConfigError) as refused:
        load_pipeline(pipeline)
    assert "blazeface.yaml:19: preprocess.normalize: still the placeholder `sdk init` wrote (" in str(refused.value)
    assert "MediaPipe detectors take x / 127.5 - 1" in str(refused.value)
    frames = portrait_frames(cv2.imread(str(ASSETS / "astronaut_256.jpg")), 8)
    (tmp_path / "frames").mkdir()
    for i, frame in enumerate(frames):
        cv2.imwrite(str(tmp_path / "frames" / f"{i:03d}.png"), frame)
    edit(pipeline, BLAZEFACE_EDITS)
    checked = sdk("check", "blazeface.yaml", cwd=tmp_path)  # the listed placeholders filled: nothing else to fix
    assert checked.returncode == 0 and "problem" not in checked.stdout, checked.stdout
    edit(pipeline, {"source.uri": "images://frames"})
    spec = load_pipeline(pipeline).spec
    assert spec.postprocess.decoder.anchors.generate.anchor_count == 896
    assert (spec.postprocess.score_threshold, spec.postprocess.iou_threshold) == (0.5, 0.3)  # MediaPipe's face detection, as written
    assert spec.budgets.warmup_frames == 10 and [s.kind for s in spec.sinks] == ["jsonl", "video"]
    lines = run_written(pipeline, 8, tmp_path / "state", tmp_path / "reports")
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    stats = compare(frames, lines, session, reference_anchors(), NAMES, band=0.01)
    assert stats["matched"] >= 8 and stats["recall"] >= 0.97 and stats["precision"] >= 0.97, stats


def test_a_detector_file_points_to_cascades_and_their_step_decoders(tmp_path):
    from tools.models.init_pipeline import init_pipeline

    one_box_and_one_score_tensor(ASSETS / "blazeface_front_128.onnx", tmp_path / "faces.onnx")
    text = init_pipeline(tmp_path / "faces.onnx").path.read_text()
    assert "# cascade: models run on the crops of these detections" in text
    assert "a decoder of kind classify, ctc or ssd: docs/guides/models.md, section Cascades." in text
    assert "## Cascades: a second model on the crops" in (REPO / "docs" / "guides" / "models.md").read_text()


def test_a_head_split_over_grids_is_refused_with_how_to_join_it(tmp_path, sdk):
    shutil.copy(ASSETS / "blazeface_front_128.onnx", tmp_path / "raw.onnx")
    done = sdk("init", "raw.onnx", cwd=tmp_path)
    assert done.returncode == 1 and "an SSD head split over 2 grids" in done.stderr and "hint: join the grids with a Concat" in done.stderr
    assert not (tmp_path / "raw.yaml").exists()


def _rapidocr_models() -> Path:
    rapidocr = pytest.importorskip("rapidocr_onnxruntime")
    return Path(rapidocr.__file__).parent / "models"


def placeholders_in(path: Path) -> list[str]:
    """The dotted keys whose value in the written file is a FILL-IN placeholder, in file order (lists indexed as [i])."""

    def walk(node, at: str):
        if isinstance(node, dict):
            for key, value in node.items():
                yield from walk(value, f"{at}.{key}" if at else str(key))
        elif isinstance(node, list):
            for i, value in enumerate(node):
                yield from walk(value, f"{at}[{i}]")
        elif isinstance(node, str) and node.startswith("FILL-IN: "):
            yield at

    return list(walk(yaml.safe_load(path.read_text()), ""))


def listed(done) -> list[str]:
    return [line.split(":")[0].strip() for line in done.stdout.splitlines() if line.startswith("  ")]


def test_the_paddleocr_classifier_of_dynamic_size_lists_every_placeholder_it_writes(tmp_path, sdk):
    model = "ch_ppocr_mobile_v2.0_cls_infer.onnx"
    shutil.copy(_rapidocr_models() / model, tmp_path / model)
    done = sdk("init", model, cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.startswith("classifier: 'save_infer_model/scale_0.tmp_1' ['?', 2] scores 2 classes"), done.stdout
    written = tmp_path / model.replace(".onnx", ".yaml")
    data = yaml.safe_load(written.read_text())
    assert data["postprocess"]["decoder"] == {"kind": "classify", "output": "save_infer_model/scale_0.tmp_1", "activation": "none", "top_k": 2}
    assert (
        listed(done)
        == placeholders_in(written)
        == [
            "preprocess.resize.width",
            "preprocess.resize.height",
            "preprocess.normalize",
            "model.prepare.inputs.x",  # the input's static shape: written, so listed
        ]
    )
    with pytest.raises(ConfigError, match=r"preprocess\.resize\.width: still the placeholder `sdk init` wrote \(the model's input width is dynamic"):
        load_pipeline(written)


def test_the_paddleocr_text_detector_is_a_db_text_detector_sized_for_its_source(tmp_path, sdk):
    shutil.copy(_rapidocr_models() / "ch_PP-OCRv4_det_infer.onnx", tmp_path / "det.onnx")
    done = sdk("init", "det.onnx", "--source", "synthetic://noise?width=1280&height=720", cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.startswith("text detector (DB): 'sigmoid_0.tmp_0'"), done.stdout
    assert listed(done) == placeholders_in(tmp_path / "det.yaml") == []
    spec = load_pipeline(tmp_path / "det.yaml").spec  # PaddleOCR's settings: nothing to fill in
    assert spec.postprocess.decoder.kind == "db" and spec.postprocess.classes == ("text",) and spec.postprocess.score_threshold == 0.6
    assert (spec.preprocess.resize.width, spec.preprocess.resize.height) == (960, 544)  # longer side 960, multiples of 32
    assert spec.model.prepare.inputs == {"x": (1, 3, 544, 960)} and spec.preprocess.color == "bgr"
    assert spec.preprocess.normalize.mean == (0.485, 0.456, 0.406) and spec.preprocess.normalize.std == (0.229, 0.224, 0.225)


def test_a_ctc_recogniser_alone_is_offered_as_a_cascade_step(tmp_path, sdk):
    shutil.copy(_rapidocr_models() / "ch_PP-OCRv4_rec_infer.onnx", tmp_path / "rec.onnx")
    done = sdk("init", "rec.onnx", cwd=tmp_path)
    assert done.returncode == 1 and "text recogniser (CTC): 'softmax_11.tmp_0'" in done.stderr and "runs as a cascade step" in done.stderr
    assert "hint: sdk init DETECTOR.onnx --cascade rec.onnx" in done.stderr and not (tmp_path / "rec.yaml").exists()


def _frames(folder: Path, frames: list[np.ndarray]) -> None:
    folder.mkdir()
    for i, frame in enumerate(frames):
        cv2.imwrite(str(folder / f"{i:03d}.png"), frame)


PADDLE_NORMALIZE = {"scale": 0.00784313725490196, "mean": [1.0, 1.0, 1.0]}  # PaddleOCR: (x / 255 - 0.5) / 0.5


@pytest.mark.slow
def test_the_paddleocr_classifier_runs_as_kind_classify_after_the_documented_edits(tmp_path, sdk, run_written):
    from tests.integration.real_models import text_image

    shutil.copy(_rapidocr_models() / "ch_ppocr_mobile_v2.0_cls_infer.onnx", tmp_path / "cls.onnx")
    assert sdk("init", "cls.onnx", cwd=tmp_path).returncode == 0
    words = ["PERCEPTION", "deploy", "Orin NX 16GB", "lane closed", "EXIT 12", "speed 80"]
    _frames(tmp_path / "frames", [text_image(words[i], 384, 96, i, flipped=bool(i % 2)) for i in range(6)])
    edit(
        tmp_path / "cls.yaml",
        {
            "source.uri": "images://frames",
            "preprocess.resize.width": 192,  # PaddleOCR's text-direction classifier: 3 x 48 x 192
            "preprocess.resize.height": 48,
            "preprocess.color": "bgr",
            "preprocess.normalize": PADDLE_NORMALIZE,
            "model.prepare.inputs": {"x": [1, 3, 48, 192]},
            "postprocess.classes": ["0_degrees", "180_degrees"],
        },
    )
    spec = load_pipeline(tmp_path / "cls.yaml").spec
    assert spec.postprocess.decoder.kind == "classify" and spec.postprocess.decoder.activation == "none"
    lines = run_written(tmp_path / "cls.yaml", 6, tmp_path / "state", tmp_path / "reports")
    assert len(lines) == 6 and all(line["detections"] == [] and len(line["classes"]) == 2 for line in lines)
    best = [line["classes"][0]["label"] for line in lines]
    assert best == ["0_degrees", "180_degrees"] * 3, best  # the real model sees which frames are upside down


@pytest.mark.slow
def test_the_paddleocr_text_detector_runs_as_written_and_finds_the_lines(tmp_path, sdk, run_written):
    from tests.integration.real_models import document_frame

    shutil.copy(_rapidocr_models() / "ch_PP-OCRv4_det_infer.onnx", tmp_path / "det.onnx")
    _frames(tmp_path / "frames", [document_frame(i) for i in range(5)])
    assert sdk("init", "det.onnx", "--source", "images://frames", cwd=tmp_path).returncode == 0
    assert load_pipeline(tmp_path / "det.yaml").spec.model.prepare.inputs == {"x": (1, 3, 352, 640)}  # 640 x 360 frames
    lines = run_written(tmp_path / "det.yaml", 5, tmp_path / "state", tmp_path / "reports")
    for line in lines:  # four lines of text a frame, each a box with its four corners
        assert len(line["detections"]) == 4 and all(d["label"] == "text" and len(d["keypoints"]) == 4 for d in line["detections"]), line


NMS_EDITS = {  # the head tests/integration/test_nms_inside_real_model.py appends: TF Object Detection API outputs
    "postprocess.decoder.box_format": "yxyx",
    "postprocess.decoder.normalized": True,
    "postprocess.decoder.class_offset": 1,
    "postprocess.classes": ["face"],
    "preprocess.normalize": {"scale": 0.00784313725490196, "mean": [1.0, 1.0, 1.0]},
}


@pytest.mark.slow
def test_a_model_ending_in_nms_gets_kind_nms_inside_and_runs_once_filled_in(tmp_path, sdk, run_written):
    from tests.integration.test_nms_inside_real_model import with_nms_head

    model = with_nms_head(ASSETS / "blazeface_front_128.onnx", tmp_path / "faces.onnx")
    done = sdk("init", model.name, cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.startswith("ends in its own NMS (NonMaxSuppression)"), done.stdout + done.stderr
    keys = [line.split(":")[0].strip() for line in done.stdout.splitlines() if line.startswith("  ")]
    assert keys == [
        "preprocess.normalize",
        "postprocess.decoder.box_format",
        "postprocess.decoder.normalized",
        "postprocess.decoder.class_offset",
        "postprocess.classes",
    ]
    data = yaml.safe_load((tmp_path / "faces.yaml").read_text())
    decoder = data["postprocess"]["decoder"]
    assert {k: decoder[k] for k in ("kind", "boxes", "scores", "classes", "count")} == {
        "kind": "nms_inside",
        "boxes": "detection_boxes",
        "scores": "detection_scores",
        "classes": "detection_classes",
        "count": "num_detections",
    }
    edit(tmp_path / "faces.yaml", {"preprocess.normalize": NMS_EDITS["preprocess.normalize"]})
    with pytest.raises(ConfigError, match=r"postprocess\.decoder\.box_format: still the placeholder `sdk init` wrote \(the order of a box row"):
        load_pipeline(tmp_path / "faces.yaml")  # refused, naming the next key to fill in
    _frames(tmp_path / "frames", portrait_frames(cv2.imread(str(ASSETS / "astronaut_256.jpg")), 6))
    edit(tmp_path / "faces.yaml", {**NMS_EDITS, "source.uri": "images://frames", "postprocess.score_threshold": 0.5})
    lines = run_written(tmp_path / "faces.yaml", 6, tmp_path / "state", tmp_path / "reports")
    assert len(lines) == 6 and all(line["detections"] and {d["label"] for d in line["detections"]} == {"face"} for line in lines)


def yolo_v8_like(path: Path, size: int = 64, classes: int = 2) -> Path:
    """A graph with a YOLOv8 head's shape ([1, 4 + C, cells of strides 8, 16, 32]) and Ultralytics' metadata, fixed weights:
    no real YOLO model is in the repository (Ultralytics' weights are AGPL), so this checks recognition and the run only."""
    rng = np.random.default_rng(0)
    nodes, inits, parts = [], [], []
    for stride in (8, 16, 32):
        w = helper.make_tensor(
            f"w{stride}", TensorProto.FLOAT, [4 + classes, 3, stride, stride], rng.normal(0, 0.02, (4 + classes) * 3 * stride * stride)
        )
        inits += [w, helper.make_tensor(f"s{stride}", TensorProto.INT64, [3], [1, 4 + classes, -1])]
        nodes += [
            helper.make_node("Conv", ["images", f"w{stride}"], [f"c{stride}"], strides=[stride, stride]),
            helper.make_node("Reshape", [f"c{stride}", f"s{stride}"], [f"r{stride}"]),
            helper.make_node("Sigmoid", [f"r{stride}"], [f"p{stride}"]),
        ]
        parts.append(f"p{stride}")
    nodes.append(helper.make_node("Concat", parts, ["raw"], axis=2))
    scale = helper.make_tensor("scale", TensorProto.FLOAT, [1, 4 + classes, 1], [size, size, size / 2, size / 2] + [1.0] * classes)
    nodes.append(helper.make_node("Mul", ["raw", "scale"], ["output0"]))
    cells = sum((size // s) ** 2 for s in (8, 16, 32))
    graph = helper.make_graph(
        nodes,
        "yolo",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, size, size])],
        [helper.make_tensor_value_info("output0", TensorProto.FLOAT, [1, 4 + classes, cells])],
        [*inits, scale],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    for key, value in (("author", "Ultralytics"), ("stride", "32"), ("names", "{0: 'person', 1: 'car'}")):
        model.metadata_props.add(key=key, value=value)
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


@pytest.mark.slow
def test_a_yolo_v8_head_is_recognised_and_runs_as_written(tmp_path, sdk, run_written):
    yolo_v8_like(tmp_path / "yolo.onnx")
    done = sdk("init", "yolo.onnx", cwd=tmp_path)
    assert done.returncode == 0 and "YOLO v8 head 'output0' [1, 6, 84]: 2 classes" in done.stdout and "fill in" not in done.stdout, done.stdout
    spec = load_pipeline(tmp_path / "yolo.yaml").spec
    assert spec.postprocess.classes == ("person", "car") and spec.preprocess.resize.mode == "letterbox"
    assert spec.preprocess.normalize.scale == pytest.approx(1 / 255)
    lines = run_written(tmp_path / "yolo.yaml", 5, tmp_path / "state", tmp_path / "reports")
    assert len(lines) == 5


@pytest.mark.slow
def test_the_real_yolox_nano_is_written_as_yoloxs_demo_runs_it_and_detects_what_the_demo_does(tmp_path, sdk, run_written):
    from tests.integration import yolox_reference

    shutil.copy(ASSETS / "yolox_nano.onnx", tmp_path / "yolox_nano.onnx")
    shutil.copy(EXAMPLE / "assets" / "vtest.avi", tmp_path / "clip.avi")
    done = sdk("init", "yolox_nano.onnx", "--source", "file://clip.avi", cwd=tmp_path)
    assert done.returncode == 0 and "YOLOX head 'output' [1, 3549, 85]: one row per cell, objectness and 80 class scores" in done.stdout, done.stdout
    assert "fill in" not in done.stdout and "next: sdk check yolox_nano.yaml, then deploy --target local yolox_nano.yaml --frames 309" in done.stdout
    spec = load_pipeline(tmp_path / "yolox_nano.yaml").spec  # nothing to fill in: YOLOX's own settings
    assert spec.preprocess.resize.model_dump() == {
        "width": 416,
        "height": 416,
        "mode": "letterbox",
        "coordinates": "half_pixel",
        "pad_value": 114,
        "align": "top_left",
        "content": "floor",  # YOLOX's int(w r) x int(h r)
    }
    assert spec.preprocess.color == "bgr" and spec.preprocess.normalize.is_identity
    assert spec.postprocess.decoder.grid_strides() == (8, 16, 32) and spec.postprocess.classes[:3] == ("person", "bicycle", "car")
    assert (spec.postprocess.score_threshold, spec.postprocess.iou_threshold, spec.postprocess.nms) == (0.3, 0.45, "class_agnostic")
    lines = run_written(tmp_path / "yolox_nano.yaml", 6, tmp_path / "state", tmp_path / "reports")
    session = ort.InferenceSession(str(ASSETS / "yolox_nano.onnx"), providers=["CPUExecutionProvider"])
    video = cv2.VideoCapture(str(tmp_path / "clip.avi"))
    for line in lines:
        ok, frame = video.read()
        ours = [(spec.postprocess.classes.index(d["label"]), d["score"], d["box"]) for d in line["detections"]]
        yolox_reference.assert_same(ours, yolox_reference.detect(session, frame), px=0.5, score=0.005)  # 2 decimals in the file
    video.release()
    assert len(lines) == 6 and sum(len(line["detections"]) for line in lines) >= 30


def test_the_model_must_be_in_the_pipeline_folder_and_so_must_the_source(tmp_path, sdk):
    (tmp_path / "elsewhere").mkdir()
    shutil.copy(ASSETS / "blazeface_front_128.onnx", tmp_path / "m.onnx")
    done = sdk("init", "m.onnx", "--output", "elsewhere/m.yaml", cwd=tmp_path)
    assert done.returncode == 1 and "is outside" in done.stderr and "write the file beside the model" in done.stderr
    (tmp_path / "elsewhere" / "clip.avi").write_bytes(b"")
    model = one_box_and_one_score_tensor(ASSETS / "blazeface_front_128.onnx", tmp_path / "joined.onnx")
    done = sdk("init", model.name, "--source", "file://elsewhere/clip.avi", cwd=tmp_path)
    assert done.returncode == 0, done.stderr  # inside the folder: kept, relative
    assert 'uri: "file://elsewhere/clip.avi"' in (tmp_path / "joined.yaml").read_text()
    done = sdk("init", model.name, "--output", "j2.yaml", "--source", f"file://{tmp_path.parent / 'x.avi'}", cwd=tmp_path)
    assert done.returncode == 1 and "--source" in done.stderr


def test_usage_errors(tmp_path, sdk):
    done = sdk("init", "missing.onnx", cwd=tmp_path)
    assert done.returncode == 1 and "missing.onnx: no such model file" in done.stderr
    (tmp_path / "bad.onnx").write_bytes(b"not a model")
    done = sdk("init", "bad.onnx", cwd=tmp_path)
    assert done.returncode == 1 and "not a readable ONNX model" in done.stderr and "Traceback" not in done.stderr


def _graph_with_outputs(path: Path, image: list, outputs: dict[str, list], *, nms: bool = False) -> Path:
    """A one-node-per-output graph with these output shapes (recognition reads shapes and names only)."""
    nodes, infos = [], []
    for name, shape in outputs.items():
        nodes.append(helper.make_node("ConstantOfShape", [f"{name}_shape"], [name]))
        infos.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, shape))
    inits = [helper.make_tensor(f"{n}_shape", TensorProto.INT64, [len(s)], [d if isinstance(d, int) else 1 for d in s]) for n, s in outputs.items()]
    if nms:
        nodes.append(helper.make_node("NonMaxSuppression", ["b", "s"], ["selected"]))
        inits += [helper.make_tensor("b", TensorProto.FLOAT, [1, 1, 4], [0, 0, 1, 1]), helper.make_tensor("s", TensorProto.FLOAT, [1, 1, 1], [1])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("images", TensorProto.FLOAT, image)], infos, inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


@pytest.mark.parametrize(
    ("outputs", "nms", "family", "decoder"),
    [
        ({"output": [1, 3 * 8400, 85]}, False, "yolo-v5", {"kind": "yolo", "output": "output", "layout": "v5"}),
        ({"output0": [1, 84, 8400]}, False, "yolo-v8", {"kind": "yolo", "output": "output0", "layout": "v8"}),
        ({"output": [1, 8400, 85]}, False, "yolox", {"kind": "yolo", "output": "output", "layout": "yolox", "strides": [8, 16, 32]}),
        ({"output": [1, 8500, 85]}, False, "yolox", {"kind": "yolo", "output": "output", "layout": "yolox", "strides": [8, 16, 32, 64]}),
        (
            {"num_dets": [1, 1], "det_boxes": [1, 100, 4], "det_scores": [1, 100], "det_classes": [1, 100]},
            False,
            "nms-inside",
            {"kind": "nms_inside", "boxes": "det_boxes", "scores": "det_scores", "classes": "det_classes", "count": "num_dets"},
        ),
        ({"boxes": [1, 100, 4]}, True, "nms-inside", {"kind": "nms_inside", "boxes": "boxes"}),  # scores and classes: placeholders
        ({"logits": [1, 1000]}, False, "classifier", {"kind": "classify", "output": "logits", "activation": "softmax", "top_k": 5}),
        ({"mask": [1, 21, 640, 640]}, False, "segmenter", {"kind": "segment", "output": "mask"}),
        ({"weird": [1, 7, 7]}, False, "unknown", {"kind": "python"}),
    ],
)
def test_families_from_output_shapes_at_640(tmp_path, outputs, nms, family, decoder):
    from tools.models.families import recognise

    found = recognise(_graph_with_outputs(tmp_path / "m.onnx", [1, 3, 640, 640], outputs, nms=nms))
    assert found.family == family and (found.width, found.height, found.layout) == (640, 640, "nchw")
    if family == "yolox":  # YOLOX's own preprocessing: BGR 0..255 into the top-left corner
        assert found.preprocess["normalize"] == {"scale": 1.0} and found.preprocess["align"] == "top_left"
    else:
        assert found.preprocess["normalize"].startswith("FILL-IN: ")  # no Ultralytics metadata: the normalisation is not known
    written = {k: v for k, v in found.decoder.items() if not (isinstance(v, str) and v.startswith("FILL-IN: "))}
    assert written == decoder
    if family.startswith("yolo"):  # 80 classes and no names: COCO's for YOLOX (its demo's), class_N otherwise
        assert found.classes[:2] == (["person", "bicycle"] if family == "yolox" else ["class_0", "class_1"]) and len(found.classes) == 80
    if family == "nms-inside":  # what only the user knows
        assert {k for k, v in found.decoder.items() if v not in written.values()} >= {"box_format", "normalized", "class_offset"}
        assert found.classes.startswith("FILL-IN: ")
    if family == "unknown":
        assert found.decoder["entry"].startswith("FILL-IN: ")


def test_extra_inputs_and_a_dynamic_batch_are_written_as_placeholders_and_prepare(tmp_path, sdk):
    model = _graph_with_outputs(tmp_path / "m.onnx", ["batch", 3, 640, 640], {"output0": ["batch", 84, 8400]})
    loaded = onnx.load(str(model))
    loaded.graph.input.append(helper.make_tensor_value_info("scale_factor", TensorProto.FLOAT, [1, 2]))
    onnx.save(loaded, str(model))
    done = sdk("init", "m.onnx", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    keys = [line.split(":")[0].strip() for line in done.stdout.splitlines() if line.startswith("  ")]
    assert keys == ["preprocess.normalize", "model.inputs.scale_factor"], done.stdout
    data = yaml.safe_load((tmp_path / "m.yaml").read_text())
    assert data["model"]["prepare"]["inputs"] == {"images": [1, 3, 640, 640], "scale_factor": [1, 2]}
