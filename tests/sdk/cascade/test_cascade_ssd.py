"""A cascade step with the `ssd` decoder on real published models: the example's pedestrian detector (SSDLite, TF Object
Detection API; pipelines/assets) finds people, and MediaPipe's BlazeFace (npm, Apache-2.0; tests/integration/assets) runs
on the square, padded crops of each person, all crops of a frame as one batch. Two steps read the same faces: `face`
with anchors generated from MediaPipe's options on a copy of BlazeFace whose batch axis is free, `face_t` with an anchor
tensor of the model (read at preparation) on the fixed-batch model (one crop at a time).

The reference is computed in the test without the SDK: the crop rectangle from the parent box, the crop letterboxed
with cv2.resize, ONNX Runtime on it, the MediaPipe decoding and NMS in plain numpy (tests/integration/mediapipe_reference),
and the crop's corner added back. Boxes and keypoints within one pixel, scores within 0.01."""

from __future__ import annotations

import json
import math
from pathlib import Path

import cv2
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

from sdk.errors import ConfigError
from sdk.spec.loader import load_pipeline
from tests.integration.mediapipe_reference import deploy_local, iou, reference_anchors, reference_detections
from tests.integration.test_blazeface_real_model import one_box_and_one_score_tensor

REPO = Path(__file__).resolve().parents[3]
ASSETS = REPO / "tests" / "integration" / "assets"
FRAMES = 10
NAMES = ("input:0", "regressors", "classificators")
PADDING = 0.15

STEP = """\
  - name: {name}
    model: {{path: {model}, threads: 1}}
    takes: {{classes: [person], min_score: 0.5, max_per_frame: 4}}
    crop: {{padding: {padding}, square: true, min_size: 16}}
    preprocess:
      resize: {{width: 128, height: 128, mode: letterbox, pad_value: 0}}
      color: rgb
      normalize: {{scale: 0.00784313725490196, mean: [1.0, 1.0, 1.0]}}
      layout: nhwc
      dtype: float32
    decoder:
      kind: ssd
      box_encodings: regressors
      class_logits: classificators
{anchors}
      box_layout: xywh
      box_size: linear
      scale_factors: [128, 128, 128, 128]
      keypoints: 6
      background_class: false
      clip_boxes: false
      classes: [face]
      score_threshold: 0.5
      iou_threshold: 0.3
      max_detections: 4
"""

GENERATED = """\
      anchors:
        generate:
          num_layers: 4
          min_scale: 0.1484375
          max_scale: 0.75
          input_size_height: 128
          input_size_width: 128
          strides: [8, 16, 16, 16]
          aspect_ratios: [1.0]
          fixed_anchor_size: true"""

TENSOR = """\
      anchors: face_anchors
      anchor_layout: yxyx"""

PIPELINE = (
    (REPO / "pipelines" / "pedestrian.yaml")
    .read_text()
    .split("sinks:")[0]
    .replace("assets/ssdlite_pedestrian.onnx", "pedestrian.onnx")
    .replace("file://assets/vtest.avi", "images://frames")
    .replace("backend: auto", "backend: onnxruntime")
    .replace("threads: 2", "threads: 1")
    + "cascade:\n"
    + STEP.format(name="face", model="face_batch.onnx", padding=PADDING, anchors=GENERATED)
    + STEP.format(name="face_t", model="face_one.onnx", padding=PADDING, anchors=TENSOR)
    + "budgets:\n  end_to_end: {p50_ms: 60000}\n  cascade: {face: {p50_ms: 60000}, face_t: {p99_ms: 60000}}\n"
)


def batch_free(source: Path, target: Path) -> Path:
    """BlazeFace with a free batch axis: its channel padding (ConstantOfShape zeros of batch 1, concatenated) becomes a
    Pad, its output Reshapes take -1 for the batch. The same numbers for each image (a test checks)."""
    model = onnx.load(str(source))
    graph = model.graph
    initializers = {i.name: i for i in graph.initializer}
    zeros, nodes = {}, []
    for node in graph.node:
        if node.op_type == "ConstantOfShape" and node.input[0] in initializers:
            zeros[node.output[0]] = int(numpy_helper.to_array(initializers[node.input[0]])[1])
            continue
        if node.op_type == "Concat" and len(node.input) == 2 and node.input[1] in zeros:
            pads = numpy_helper.from_array(np.array([0, 0, 0, 0, 0, zeros[node.input[1]], 0, 0], np.int64), node.output[0] + "_pads")
            graph.initializer.append(pads)
            nodes.append(helper.make_node("Pad", [node.input[0], pads.name], list(node.output)))
            continue
        if node.op_type == "Reshape" and node.input[1] in initializers:
            shape = numpy_helper.to_array(initializers[node.input[1]]).copy()
            shape[0] = -1
            initializers[node.input[1]].CopyFrom(numpy_helper.from_array(shape, node.input[1]))
        nodes.append(node)
    del graph.node[:]
    graph.node.extend(nodes)
    for value in (*graph.input, *graph.output):
        dim = value.type.tensor_type.shape.dim[0]
        dim.ClearField("dim_value")
        dim.dim_param = "N"
    del graph.value_info[:]  # shapes inferred for a batch of 1
    onnx.checker.check_model(model)
    onnx.save(model, str(target))
    return target


def with_anchor_tensor(source: Path, target: Path) -> Path:
    """The model with MediaPipe's anchors stored as a constant `face_anchors` (corners y1, x1, y2, x2), as TF exports do."""
    model = onnx.load(str(source))
    a = reference_anchors()
    corners = np.stack([a[:, 1] - a[:, 3] / 2, a[:, 0] - a[:, 2] / 2, a[:, 1] + a[:, 3] / 2, a[:, 0] + a[:, 2] / 2], axis=1)
    model.graph.initializer.append(numpy_helper.from_array(corners.astype(np.float32), "face_anchors"))
    onnx.save(model, str(target))
    return target


def people_frames(count: int, width: int = 640, height: int = 480) -> list[np.ndarray]:
    """A noisy background with the astronaut portrait (head and shoulders, mirrored) at several sizes and places; a
    second one, smaller, on the other side in every other frame (two crops in one batch)."""
    portrait = cv2.imread(str(ASSETS / "astronaut_256.jpg"))[:, ::-1]
    rng = np.random.default_rng(1)
    frames = []
    for i in range(count):
        frame = (np.full((height, width, 3), 110) + rng.integers(0, 30, (height, width, 3))).astype(np.uint8)
        size = int(250 + 100 * (i % 4) / 3)
        x = int((width - size) * ((i * 3) % 5) / 4)
        frame[height - size :, x : x + size] = cv2.resize(portrait, (size, size), interpolation=cv2.INTER_AREA)
        if i % 2 and size + 250 <= width:
            x2 = 0 if x > (width - size) / 2 else width - 250
            frame[height - 250 :, x2 : x2 + 250] = cv2.resize(portrait, (250, 250), interpolation=cv2.INTER_AREA)
        frames.append(frame)
    return frames


def cascade_folder(tmp_path: Path) -> tuple[Path, list[np.ndarray]]:
    folder = tmp_path / "people"
    (folder / "frames").mkdir(parents=True)
    (folder / "pedestrian.onnx").write_bytes((REPO / "pipelines" / "assets" / "ssdlite_pedestrian.onnx").read_bytes())
    joined = one_box_and_one_score_tensor(ASSETS / "blazeface_front_128.onnx", tmp_path / "joined.onnx")
    batch_free(joined, folder / "face_batch.onnx")
    with_anchor_tensor(joined, folder / "face_one.onnx")
    frames = people_frames(FRAMES)
    for i, frame in enumerate(frames):
        cv2.imwrite(str(folder / "frames" / f"{i:03d}.png"), frame)  # lossless: both sides read the same pixels
    (folder / "people.yaml").write_text(PIPELINE)
    return folder, frames


def reference_crop(box: list[float], width: int, height: int) -> tuple[int, int, int, int]:
    """The step's crop, written from the documented rule: a square of the box's longer side about its centre, grown by
    PADDING of that side on every edge, out to whole pixels, inside the frame."""
    side = max(box[2] - box[0], box[3] - box[1])
    half = side * (1 + 2 * PADDING) / 2
    cx, cy = (box[0] + box[2]) / 2, (box[1] + box[3]) / 2
    return max(0, math.floor(cx - half)), max(0, math.floor(cy - half)), min(width, math.ceil(cx + half)), min(height, math.ceil(cy + half))


def test_batch_free_blazeface_gives_each_image_what_the_published_model_gives(tmp_path):
    joined = one_box_and_one_score_tensor(ASSETS / "blazeface_front_128.onnx", tmp_path / "joined.onnx")
    quiet = ort.SessionOptions()
    quiet.log_severity_level = 3
    one = ort.InferenceSession(str(joined), quiet, providers=["CPUExecutionProvider"])
    many = ort.InferenceSession(str(batch_free(joined, tmp_path / "free.onnx")), quiet, providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).uniform(-1, 1, (3, 128, 128, 3)).astype(np.float32)
    batched = many.run(None, {"input:0": x})
    for k in range(3):
        for a, b in zip(one.run(None, {"input:0": x[k : k + 1]}), batched, strict=True):
            np.testing.assert_allclose(a[0], b[k], atol=1e-5)


@pytest.mark.slow
def test_blazeface_on_person_crops_matches_the_numpy_reference_through_deploy_local(tmp_path):
    folder, frames = cascade_folder(tmp_path)
    lines = deploy_local(folder / "people.yaml", FRAMES, tmp_path / "state", tmp_path / "reports")
    quiet = ort.SessionOptions()
    quiet.log_severity_level = 3
    session = ort.InferenceSession(str(folder / "face_one.onnx"), quiet, providers=["CPUExecutionProvider"])
    anchors = reference_anchors()
    crops = faces = two = 0
    worst = {"box": 0.0, "score": 0.0, "keypoint": 0.0}
    for frame, line in zip(frames, lines, strict=True):
        height, width = frame.shape[:2]
        people = [d for d in line["detections"] if d["label"] == "person" and d["score"] >= 0.5][:4]
        two += len(people) >= 2
        for d in line["detections"]:
            assert ("secondary" in d) == (d in people), d  # exactly the detections the step takes carry its results
        for person in people:
            x1, y1, x2, y2 = reference_crop(person["box"], width, height)
            theirs = reference_detections(session, np.ascontiguousarray(frame[y1:y2, x1:x2]), anchors, NAMES)
            crops += 1
            for step in ("face", "face_t"):
                ours = person["secondary"][step]["detections"]
                assert len(ours) == len(theirs), (step, ours, theirs)
                for (score, box, points), mine in zip(theirs, ours, strict=True):
                    box = np.array(box) + [x1, y1, x1, y1]
                    assert iou(box, mine["box"]) > 0.9 and mine["label"] == "face", (mine, box)
                    worst["box"] = max(worst["box"], float(np.abs(np.array(mine["box"]) - box).max()))
                    worst["score"] = max(worst["score"], abs(mine["score"] - score))
                    worst["keypoint"] = max(worst["keypoint"], float(np.abs(np.array(mine["keypoints"]) - (points + [x1, y1])).max()))
            faces += len(theirs)
            # The face lies in the upper part of the person: the cascade found what a face detector should.
            for mine in person["secondary"]["face"]["detections"]:
                assert person["box"][1] - 1 <= mine["box"][1] and mine["box"][3] <= (person["box"][1] + person["box"][3]) / 2 + 40, (person, mine)
    print(crops, faces, two, worst)
    assert crops >= 8 and two >= 2 and faces >= crops - 1, (crops, faces, two)
    assert worst["box"] <= 1.0 and worst["keypoint"] <= 1.0 and worst["score"] <= 0.01, worst
    report = json.loads((tmp_path / "reports" / "report.json").read_text())
    assert set(report["cascade"]) == {"face", "face_t"} and report["cascade"]["face"]["p50_ms"] > 0, report["cascade"]
    names = sorted(c["name"] for c in report["checks"] if c["name"].startswith("cascade."))
    assert names == ["cascade.face.p50_ms", "cascade.face_t.p99_ms"], names


def _pipeline(tmp_path: Path, text: str) -> Path:
    folder = tmp_path / "people"
    (folder / "frames").mkdir(parents=True, exist_ok=True)
    for name in ("pedestrian.onnx", "face_batch.onnx", "face_one.onnx"):
        (folder / name).write_bytes(b"")  # load checks that the files exist; nothing reads them
    (folder / "people.yaml").write_text(text)
    return folder / "people.yaml"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            ("strides: [8, 16, 16, 16]", "strides: [8, 16, 16]"),
            r"cascade\[0\]\.decoder\.anchors\.generate\.strides: 3 stride\(s\) \[8, 16, 16\] for num_layers 4",
        ),
        (
            ("input_size_width: 128", "input_size_width: 256"),
            r"cascade\[0\]\.decoder\.anchors\.generate\.input_size_width: 256 differs from the step's preprocess\.resize\.width 128",
        ),
        (("      classes: [face]\n", ""), r"cascade\[0\]\.decoder\.classes: required key is missing"),
        (("box_size: linear", "box_size: log"), r"cascade\[0\]\.decoder\.box_size: .*'exp' or 'linear'"),
        (("max_detections: 4", "max_detections: 5000"), r"cascade\[0\]\.decoder\.max_detections: "),
        (
            ("iou_threshold: 0.3", "iou_treshold: 0.3"),
            r"cascade\[0\]\.decoder\.iou_treshold: unknown key 'iou_treshold'; did you mean 'iou_threshold'\?",
        ),
        (
            ("fixed_anchor_size: true", "fixed_anchor_size: true\n      anchor_layout: xyxy"),
            r"cascade\[0\]\.decoder\.anchor_layout: xyxy describes the corners",
        ),
    ],
)
def test_a_cascade_ssd_step_is_validated_at_load(tmp_path, change, message):
    old, new = change
    assert old in PIPELINE
    text = PIPELINE.replace(old, new, 1)
    with pytest.raises(ConfigError, match=message) as caught:
        load_pipeline(_pipeline(tmp_path, text))
    assert "\n" not in str(caught.value)


def test_a_cascade_ssd_step_loads(tmp_path):
    spec = load_pipeline(_pipeline(tmp_path, PIPELINE)).spec
    face, face_t = spec.cascade
    assert face.decoder.kind == face_t.decoder.kind == "ssd"
    assert face.decoder.anchors.generate.anchor_count == 896 and face_t.decoder.anchors == "face_anchors"
    assert face.decoder.keypoints == 6 and face.decoder.classes == ("face",) and face.decoder.max_detections == 4


def test_the_guide_documents_the_ssd_step_with_an_example_that_loads(tmp_path):
    guide = (REPO / "docs" / "guides" / "models.md").read_text()
    section = guide[guide.index("### An SSD on the crops (`kind: ssd`)") :]
    example = section[section.index("```yaml\n") + 8 : section.index("```\n", section.index("```yaml\n") + 8)]
    assert '"secondary": {"face": {"detections": [' in section  # the result's documented form
    path = _pipeline(tmp_path, PIPELINE.split("cascade:\n")[0] + example)
    (path.parent / "blazeface.onnx").write_bytes(b"")
    (step,) = load_pipeline(path).spec.cascade
    assert step.decoder.kind == "ssd" and step.decoder.keypoints == 6 and step.decoder.anchors.generate.anchor_count == 896


def test_a_step_naming_an_output_its_model_lacks_is_refused_when_it_opens(tmp_path):
    from sdk.cascade import CascadeStage
    from sdk.errors import ModelError

    folder = tmp_path / "people"
    (folder / "frames").mkdir(parents=True)
    one_box_and_one_score_tensor(ASSETS / "blazeface_front_128.onnx", folder / "face_batch.onnx")
    for name in ("pedestrian.onnx", "face_one.onnx"):
        (folder / name).write_bytes(b"")
    (folder / "people.yaml").write_text(PIPELINE.replace("class_logits: classificators", "class_logits: scores", 1))
    step = load_pipeline(folder / "people.yaml").spec.cascade[0]
    with pytest.raises(
        ModelError,
        match=r"cascade\[0\] \(face\)\.decoder\.class_logits: the step's model has no output 'scores'; it has \['classificators', 'regressors'\]",
    ):
        CascadeStage((step,), folder)
    (folder / "people.yaml").write_text(PIPELINE.replace("keypoints: 6", "keypoints: 7", 1))
    step = load_pipeline(folder / "people.yaml").spec.cascade[0]
    with pytest.raises(
        ModelError, match=r"cascade\[0\] \(face\): decoder\.box_encodings: .*holds 16 values per anchor, but keypoints: 7 reads 18"
    ) as caught:
        CascadeStage((step,), folder)
    assert caught.value.hint == "16 values are 4 box values and 6 keypoints: set decoder.keypoints to at most 6"


def test_a_step_anchor_tensor_is_read_at_preparation_and_a_missing_one_named(tmp_path):
    from sdk.errors import ModelError
    from tools.models.prepare import PrepareModel

    folder, _ = cascade_folder(tmp_path)
    pipeline = load_pipeline(folder / "people.yaml")
    tensors = PrepareModel(pipeline, tmp_path / "cache")().load_tensors()
    a = reference_anchors()
    np.testing.assert_allclose(tensors["cascade/face_t/face_anchors"][:, 1], a[:, 0] - a[:, 2] / 2, atol=1e-7)  # x1, as stored
    assert "Postprocessor/ExpandDims:0" in tensors  # the first model's anchors as before
    (folder / "people.yaml").write_text(PIPELINE.replace("anchors: face_anchors", "anchors: no_such_tensor"))
    with pytest.raises(
        ModelError, match=r"face_one\.onnx: tensor 'no_such_tensor' is not a constant of the graph \(cascade step 'face_t', decoder\.anchors\)"
    ):
        PrepareModel(load_pipeline(folder / "people.yaml"), tmp_path / "cache")()
