"""Several cameras, one model: real videos batched through ONNX Runtime, each camera equal to its own run;
cameras that end early, stall or disconnect never hold the others; bad `sources:` settings in one line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

from sdk.errors import ConfigError
from sdk.runtime import PipelineRunner
from sdk.runtime.report import build_report
from sdk.spec import load_pipeline
from tools.models.prepare import PrepareModel

REPO = Path(__file__).resolve().parents[3]
VTEST = REPO / "pipelines" / "assets" / "vtest.avi"  # the shipped recording (a campus walkway)
TREE = REPO / "tests" / "integration" / "assets" / "tree.avi"  # OpenCV's sample recording (see PROVENANCE.md)
CROP = {"x": 200, "y": 100, "width": 400, "height": 400}


def pedestrian(folder: Path, cameras: dict[str, dict] | None = None, source: dict | None = None, frames: int = 12, **extra) -> Path:
    """The example pipeline with `sources:` (or `source:`), unpaced, `frames` per camera, in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    assets = folder / "assets"
    assets.mkdir(exist_ok=True)
    for path in (REPO / "pipelines" / "assets" / "ssdlite_pedestrian.onnx", VTEST, TREE):
        if not (assets / path.name).exists():
            shutil.copy(path, assets / path.name)
    doc = yaml.safe_load((REPO / "pipelines" / "pedestrian.yaml").read_text())
    for key in ("source", "calibration"):
        doc.pop(key)
    doc["budgets"] = {"warmup_frames": 2, "end_to_end": {"p50_ms": 60000}}

    def block(spec: dict) -> dict:
        out = {"uri": f"file://assets/{spec['file']}", "replay": {"frames": spec.get("frames", frames)}}
        if "crop" in spec:
            out["crop"] = spec["crop"]
        return out

    if cameras is not None:
        doc["sources"] = {name: block(spec) for name, spec in cameras.items()}
    else:
        doc["source"] = block(source)
        if "crop" in source:
            doc["source"].pop("crop")
            doc["preprocess"]["crop"] = source["crop"]
    doc.update(extra)
    path = folder / "p.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def run(path: Path, out: Path, cache: Path):
    pipeline = load_pipeline(path)
    artifacts = PrepareModel(pipeline, cache)()
    result = PipelineRunner(pipeline, artifacts, out).run()
    lines = [json.loads(line) for line in (out / "detections.jsonl").read_text().splitlines()]
    return result, build_report(pipeline, result, target="local"), lines


def outputs(lines: list[dict], camera: str | None = None) -> list[tuple]:
    """(frame, detections) of one camera, capture times aside (they are the run's clock)."""
    return [(line["frame"], line["detections"]) for line in lines if camera is None or line.get("camera") == camera]


# Frames a camera in the batched runs: each camera's every frame is compared with its own run bit for bit, and the
# "right" camera's recording (5 frames) ends before the others'.
FRAMES = 8


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """One host cache for the module's runs of the example (each prepared model, batch 1 and batch N, prepared once, as
    a host's cache keeps it) and each single-camera run made once: the two- and four-camera cases compare their front
    and rear cameras with the same single runs (the same recording, frames and settings)."""
    root = tmp_path_factory.mktemp("multicam")
    singles: dict[str, tuple] = {}

    def single(spec: dict) -> tuple:
        key = json.dumps(spec, sort_keys=True)
        if key not in singles:
            folder = root / f"single-{len(singles)}"
            singles[key] = run(pedestrian(folder, source=spec, frames=FRAMES), folder / "out", root / "cache")
        return singles[key]

    return root / "cache", single


@pytest.mark.slow
@pytest.mark.xdist_group("multicam-example")  # the module's shared cache and single runs: one worker
@pytest.mark.parametrize(
    "cameras",
    [
        {"front": {"file": "vtest.avi"}, "rear": {"file": "tree.avi"}},
        {
            "front": {"file": "vtest.avi"},
            "rear": {"file": "tree.avi"},
            "left": {"file": "vtest.avi", "crop": CROP},
            "right": {"file": "vtest.avi", "frames": 5},  # its recording ends early: the others go on
        },
    ],
    ids=["two", "four"],
)
def test_each_camera_equals_its_single_camera_run(tmp_path, cameras, shared):
    cache, single_run = shared
    result, report, lines = run(pedestrian(tmp_path / "multi", cameras, frames=FRAMES), tmp_path / "out", cache)
    assert result.batch == len(cameras)  # one inference call takes a frame of every camera
    assert report["batching"]["frames_per_call"] == len(cameras)
    assert all("camera" in line for line in lines)
    for name, spec in cameras.items():
        _, single_report, single = single_run(spec)
        assert single_report["batching"]["frames_per_call"] == 1
        assert outputs(lines, name) == outputs(single)  # same frames, boxes and scores
        assert len(outputs(single)) == spec.get("frames", FRAMES)
        assert report["cameras"][name]["end_to_end"]["p50_ms"] > 0
        assert report["cameras"][name]["frames"] == spec.get("frames", FRAMES)
    assert sum(len(d) for _, d in outputs(lines, "front")) > 0  # people on the walkway: the comparison is not vacuous
    if "left" in cameras:  # its own crop: other boxes than the same frames uncropped
        assert outputs(lines, "left") != outputs(lines, "front")
    assert report["frames"] == sum(spec.get("frames", FRAMES) for spec in cameras.values())
    videos = sorted(p.name for p in (tmp_path / "out").glob("annotated-*.mp4"))
    assert videos == sorted(f"annotated-{name}.mp4" for name in cameras)


@pytest.mark.slow
@pytest.mark.xdist_group("multicam-example")
def test_a_batch_of_n_through_onnx_runtime_equals_n_single_runs(tmp_path, shared):
    import cv2

    from sdk.backends.onnxruntime_cpu import OnnxRuntimeBackend
    from sdk.preprocess import CpuPreprocessor

    single = load_pipeline(pedestrian(tmp_path / "one", source={"file": "vtest.avi"}))
    four = load_pipeline(pedestrian(tmp_path / "four", {n: {"file": "vtest.avi"} for n in "abcd"}))
    capture = cv2.VideoCapture(str(VTEST))
    images = [capture.read()[1] for _ in range(40)][::10]  # four real frames, apart
    capture.release()
    cache, _ = shared
    with OnnxRuntimeBackend(PrepareModel(four, cache)().model_path, threads=1) as batched:
        ((_, batch_input),) = batched.inputs.items()
        assert batch_input.shape[0] == 4  # model.prepare's batch of 1 became the camera count
        for slot, image in enumerate(images):
            CpuPreprocessor(four.spec.preprocess, batch_input[slot : slot + 1])(image)
        batched.infer()
        together = {name: array.copy() for name, array in batched.outputs.items()}
    with OnnxRuntimeBackend(PrepareModel(single, cache)().model_path, threads=1) as one:
        ((_, one_input),) = one.inputs.items()
        preprocess = CpuPreprocessor(single.spec.preprocess, one_input)
        for slot, image in enumerate(images):
            preprocess(image)
            one.infer()
            for name, array in one.outputs.items():
                np.testing.assert_array_equal(together[name][slot : slot + 1], array)


TINY = """\
version: 1
name: tiny
sources:
{sources}
batch: {{wait_ms: 30}}
preprocess:
  resize: {{width: 32, height: 32}}
  normalize: {{scale: 0.00392156862745098}}
model:
  path: tiny.onnx
  threads: 1
postprocess:
  decoder: {{kind: yolo, output: output0, layout: v5}}
  classes: [car, person]
sinks:
  - {{kind: jsonl}}
budgets:
  warmup_frames: 0
  cameras:
    steady: {{end_to_end: {{p50_ms: 60000}}}}
"""


def test_late_stalled_and_unplugged_cameras_never_hold_the_others(tmp_path):
    from tests.conftest import tiny_yolo

    live = "synthetic://boxes?width=64&height=48&live=1"
    sources = {
        "steady": f"{live}&fps=30&frames=1000",
        "short": "synthetic://boxes?width=64&height=48&frames=5",  # a recording that ends at once
        "stalling": f"{live}&fps=1&frames=1000",  # a frame every 1000 ms
        "unplugged": f"{live}&fps=30&frames=1000&unplug_at=5&unplug_ms=1200",  # the cable out for 1.2 s
    }
    block = "\n".join(
        f'  {name}: {{uri: "{uri}", replay: {{frames: {45 if name == "steady" else 5 if name == "short" else 1000}}}, '
        "reconnect: {initial_backoff_s: 0.05, max_backoff_s: 0.1}}"
        for name, uri in sources.items()
    )
    folder = tmp_path / "p"
    folder.mkdir()
    tiny_yolo(folder / "tiny.onnx")
    (folder / "tiny.yaml").write_text(TINY.format(sources=block))
    pipeline = load_pipeline(folder / "tiny.yaml")
    artifacts = PrepareModel(pipeline, tmp_path / "cache")()
    runner = PipelineRunner(pipeline, artifacts, tmp_path / "out")
    conditions = set()

    def on_frame(_count: int) -> None:
        counters = {c.name: c.stream.counters for c in runner._cameras}
        conditions.add((runner.stream.condition() or "").split(" (")[0])  # what a service's status says
        if counters["steady"].delivered >= 45:
            runner.stop()

    runner.on_frame = on_frame
    result = runner.run()
    report = build_report(pipeline, result, target="local")
    cameras = report["cameras"]
    assert report["batching"]["frames_per_call"] == 1
    assert "one after another" in report["batching"]["note"]  # the tiny model's fixed batch of 1
    # 45 steady frames at 30 fps is 1.5 s: it kept its rate while the others stalled, ended or were unplugged.
    assert cameras["steady"]["frames"] + cameras["steady"]["dropped"] >= 40
    assert cameras["short"]["frames"] == 5 and cameras["short"]["skipped_slots"] == 0  # ended: no gap is counted after its end
    assert cameras["stalling"]["skipped_slots"] > 0 and cameras["stalling"]["frames"] < 10
    assert cameras["unplugged"]["disconnects"] == 1 and cameras["unplugged"]["skipped_slots"] > 0
    # Never waited for the stalled (1000 ms) or unplugged (1200 ms) camera: the steady camera's worst frame took 70 to
    # 195 ms at load 11 (three runs), 600 is 3 times that and half a stall.
    assert cameras["steady"]["end_to_end"]["max_ms"] < 600
    assert [c["name"] for c in report["checks"]][-1] == "cameras.steady.end_to_end.p50_ms"
    lines = [json.loads(line) for line in (tmp_path / "out" / "detections.jsonl").read_text().splitlines()]
    assert {line["camera"] for line in lines} == set(sources)
    assert "camera unplugged reconnecting" in conditions  # degraded, naming the camera, while the others ran
    assert report["disconnects"] == 1


def test_each_cameras_lost_frames_are_its_own_and_add_up(tmp_path, video_path):
    from tests.conftest import tiny_yolo
    from tests.sdk.sources.recordings import cut_clip

    folder = tmp_path / "p"
    folder.mkdir()
    cut_clip(folder, video_path)  # clip.avi (60 frames) and cut.avi (frames 20 to 29 cut out with FFmpeg)
    tiny_yolo(folder / "tiny.onnx")
    block = "  front: {uri: file://cut.avi}\n  rear: {uri: file://clip.avi}"
    (folder / "tiny.yaml").write_text(TINY.format(sources=block).replace("    steady:", "    front:"))
    pipeline = load_pipeline(folder / "tiny.yaml")
    result = PipelineRunner(pipeline, PrepareModel(pipeline, tmp_path / "cache")(), tmp_path / "out").run()
    report = build_report(pipeline, result, target="local")
    cameras = report["cameras"]
    assert (cameras["front"]["frames"], cameras["front"]["lost_frames"]) == (50, 10)
    assert (cameras["rear"]["frames"], cameras["rear"]["lost_frames"]) == (60, 0)
    assert report["lost_frames"] == 10 and report["corrupt_frames"] == 0
    assert [n.split(":")[0] for n in report["notes"] if "lost_frames" in n] == ["file"]  # one note, the front camera's
    assert any(n.startswith("file://cut.avi: 10 frame(s)") for n in report["notes"])


BAD = [
    ({"source": {"uri": "file://assets/vtest.avi"}, "sources": {"a": {"uri": "file://assets/vtest.avi"}}}, "both `source` and `sources`"),
    ({}, "neither `source` nor `sources`"),
    ({"sources": {"front cam": {"uri": "file://assets/vtest.avi"}}}, "camera name 'front cam'"),
    ({"sources": {}}, "names no camera"),
    ({"sources": {"a": {"uri": "file://assets/vtest.avi"}}, "budgets": {"cameras": {"b": {"end_to_end": {"p50_ms": 5}}}}}, "'b' is not a camera"),
    ({"sources": {"a": {"uri": "file://assets/vtest.avi", "crop": {"width": 0, "height": 5}}}}, "sources.a.crop.width"),
    ({"sources": {"a": {"uri": "file://assets/vtest.avi"}}, "batch": {"wait_ms": -1}}, "batch.wait_ms"),
    ({"sources": {"a": {"uri": "file://assets/vtest.avi"}}, "batch": {"size": 2}}, "batch.size"),
]


@pytest.mark.parametrize(("change", "words"), BAD, ids=[str(i) for i in range(len(BAD))])
def test_bad_sources_settings_are_one_line_errors(tmp_path, change, words):
    doc = yaml.safe_load((REPO / "pipelines" / "pedestrian.yaml").read_text())
    doc.pop("source")
    doc.update(change)
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError) as raised:
        load_pipeline(path, check_files=False)
    message = raised.value.message
    assert "\n" not in message and str(path) in message and words in message, message


def test_a_prepared_batch_other_than_one_or_the_camera_count_is_refused(tmp_path):
    doc = yaml.safe_load((REPO / "pipelines" / "pedestrian.yaml").read_text())
    doc.pop("source")
    doc["sources"] = {"a": {"uri": "file://assets/vtest.avi"}, "b": {"uri": "file://assets/vtest.avi"}}
    doc["model"]["prepare"]["inputs"]["Preprocessor/sub:0"] = [3, 3, 300, 300]
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError, match="with a batch of 1 or 2"):
        load_pipeline(path, check_files=False)


def test_source_is_one_camera_named_after_the_pipeline():
    pipeline = load_pipeline(REPO / "pipelines" / "pedestrian.yaml", check_files=False)
    assert list(pipeline.spec.cameras) == ["pedestrian"] and not pipeline.spec.multi_camera
    assert pipeline.spec.prepared_inputs() == {"Preprocessor/sub:0": (1, 3, 300, 300)}
