"""INT8 of a pipeline with several cameras, on real recordings: calibration frames drawn from every camera
(stratified, evenly spaced, through each camera's own preprocessing), and the accuracy gate judged per camera."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import cv2
import numpy as np
import onnxruntime as ort
import pytest
import yaml

from sdk.errors import ConfigError, ModelError
from sdk.spec import load_pipeline
from sdk.spec.schema import Calibration
from tests.tools.int8.test_calibrate import shared_prepared
from tools.int8.activation_stats import CollectStatistics
from tools.int8.calibrate import Calibrate, chosen_ranges, iter_preprocessed_frames
from tools.int8.calibration_frames import select_camera_frames, share
from tools.int8.for_deploy import Int8ForDeploy, one_frame_per_call
from tools.models.prepare import PrepareModel
from tools.progress import SilentProgress

REPO = Path(__file__).resolve().parents[3]
VTEST = REPO / "pipelines" / "assets" / "vtest.avi"  # 795 frames, 768x576, people walking
TREE = REPO / "tests" / "integration" / "assets" / "tree.avi"  # 68 frames, 320x240, OpenCV's sample recording
CROP = {"x": 200, "y": 100, "width": 400, "height": 400}


def pipeline_file(folder: Path, cameras: dict[str, dict] | None, batch=1, **calibration) -> Path:
    """The example pipeline with these cameras (`sources:`; None: the example's own `source:`), a small calibration."""
    folder.mkdir(parents=True, exist_ok=True)
    assets = folder / "assets"
    assets.mkdir(exist_ok=True)
    for path in (REPO / "pipelines" / "assets" / "ssdlite_pedestrian.onnx", VTEST, TREE):
        if not (assets / path.name).exists():
            shutil.copy(path, assets / path.name)
    doc = yaml.safe_load((REPO / "pipelines" / "pedestrian.yaml").read_text())
    if cameras is not None:
        doc.pop("source")
        doc["sources"] = cameras
        doc["batch"] = {"size": batch}
    doc["calibration"].update({"frames": 8, "holdout_frames": 8, "method": "minmax", "fallback": "none", **calibration})
    path = folder / "p.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


TREE_REAR = {"uri": "file://assets/tree.avi", "crop": {"x": 40, "y": 20, "width": 240, "height": 200}}


def two_cameras(folder: Path, rear: dict | None = None, batch=1, **calibration) -> Path:
    rear = rear or TREE_REAR
    return pipeline_file(folder, {"front": {"uri": "file://assets/vtest.avi"}, "rear": rear}, batch, **calibration)


def test_shares_are_equal_and_a_short_camera_gives_what_it_has():
    assert share(10, {"a": 100, "b": 100}) == {"a": 5, "b": 5}
    assert share(11, {"a": 100, "b": 100, "c": 100}) == {"a": 4, "b": 4, "c": 3}  # the remainder: the first cameras
    assert share(30, {"a": 4, "b": 100, "c": 100}) == {"a": 4, "b": 13, "c": 13}  # a's shortfall split equally
    assert share(30, {"a": 4, "b": 10, "c": 100}) == {"a": 4, "b": 10, "c": 16}
    assert share(30, {"a": 4, "b": 10}) == {"a": 4, "b": 10}  # not enough in all: the caller refuses


def test_stratified_selection_counts_spacing_and_determinism():
    spec = Calibration(frames=300, holdout_frames=50)
    selection = select_camera_frames({"front": 795, "rear": 68}, spec)
    # Holdout: 25 each (the rear camera gives at most half its frames, 34); calibration: rear gives its 43 left.
    assert selection.counts() == {
        "front": {"frames": 257, "holdout_frames": 25, "source_frames": 795},
        "rear": {"frames": 43, "holdout_frames": 25, "source_frames": 68},
    }
    assert selection == select_camera_frames({"front": 795, "rear": 68}, spec)
    for name, total in selection.source_frames.items():
        calibration, holdout = selection.calibration[name], selection.holdout[name]
        assert not set(calibration) & set(holdout) and list(calibration) == sorted(calibration)
        picked = sorted(calibration + holdout)
        gaps = np.diff(picked)
        assert gaps.max() - gaps.min() <= 1 and picked[0] <= gaps.max() and total - 1 - picked[-1] <= gaps.max()  # evenly spaced
    # Equal shares when every camera has room; stride and seed choose the candidates.
    even = select_camera_frames({"a": 795, "b": 795, "c": 795}, Calibration(frames=30, holdout_frames=9, stride=4, seed=5))
    assert {n: (c["frames"], c["holdout_frames"]) for n, c in even.counts().items()} == {"a": (10, 3), "b": (10, 3), "c": (10, 3)}
    assert all(i % 4 == 1 for held in (even.calibration, even.holdout) for frames in held.values() for i in frames)
    with pytest.raises(ConfigError, match="the cameras have front 795 .795 at stride 1., rear 68 .68 at stride 1.") as raised:
        select_camera_frames({"front": 795, "rear": 68}, Calibration(frames=820, holdout_frames=50))
    assert "\n" not in raised.value.message


def test_real_recordings_share_and_a_single_camera_keeps_its_draw(tmp_path):
    pipeline = load_pipeline(two_cameras(tmp_path / "two", frames=300, holdout_frames=50))
    counts = Calibrate(pipeline, None, tmp_path / "cache").selection.counts()
    assert counts["front"] == {"frames": 257, "holdout_frames": 25, "source_frames": 795}
    assert counts["rear"] == {"frames": 43, "holdout_frames": 25, "source_frames": 68}
    # `source:` keeps its seeded draw (tools.int8.calibrate.select_frames), as before.
    one = load_pipeline(pipeline_file(tmp_path / "one", None, frames=300, holdout_frames=50))
    assert len(Calibrate(one, None, tmp_path / "cache").selection.calibration) == 300
    # calibration.source on several cameras: that one recording, as before.
    named = load_pipeline(two_cameras(tmp_path / "named", source="file://assets/tree.avi"))
    assert len(Calibrate(named, None, tmp_path / "cache").selection.calibration) == 8


def test_a_live_camera_is_refused_in_one_line(tmp_path):
    pipeline = load_pipeline(two_cameras(tmp_path, rear={"uri": "v4l2:///dev/video7"}), check_files=False)
    with pytest.raises(ConfigError, match=r"sources.rear.uri: calibration draws frames from every camera .* 'v4l2:///dev/video7'") as raised:
        _ = Calibrate(pipeline, None, tmp_path / "cache").selection
    assert "\n" not in raised.value.message


@pytest.mark.slow
def test_two_cameras_calibrate_on_the_union_of_their_frames(tmp_path, tmp_path_factory):
    """The ranges of a two-camera calibration are those of every camera's frames together, each camera's frames made
    by its own one-camera pipeline (its crop as preprocess.crop): the runtime's preprocessing, camera by camera."""
    # The shared calibration (8 frames a camera, the rear one cropped; the equality below holds for any count, and each
    # camera's frames set some of the ranges), read only: its cached preparation and calibration are found, not redone.
    shared = shared_two_camera_int8(tmp_path_factory, "tree")
    pipeline = load_pipeline(shared / "p.yaml")
    assert pipeline.spec.cameras["rear"].crop is not None
    model = PrepareModel(pipeline, shared / "cache")()
    artifacts = Calibrate(pipeline, model, shared / "cache")()
    ranges = json.loads(artifacts.ranges.read_text())
    assert ranges["cameras"] == {
        "front": {"frames": 8, "holdout_frames": 8, "source_frames": 795},
        "rear": {"frames": 8, "holdout_frames": 8, "source_frames": 68},
    }
    # The one-camera pipelines' media beside them, as links to the shared files (a pipeline's paths stay in its folder).
    shutil.copytree(shared / "assets", tmp_path / "two" / "assets", copy_function=os.link)
    frames = []
    for name, camera in pipeline.spec.cameras.items():
        doc = yaml.safe_load(pipeline.path.read_text())
        doc.pop("sources")
        doc.pop("batch")
        doc["source"] = {"uri": camera.uri}
        if camera.crop is not None:
            doc["preprocess"]["crop"] = camera.crop.model_dump()
        (tmp_path / "two" / f"{name}.yaml").write_text(yaml.safe_dump(doc))
        alone = load_pipeline(tmp_path / "two" / f"{name}.yaml")
        drawn = list(iter_preprocessed_frames(alone, set(ranges["frames"][name]), (1, 3, 300, 300)))
        assert [index for index, _ in drawn] == ranges["frames"][name]
        frames += [tensor for _, tensor in drawn]
    union = chosen_ranges(CollectStatistics(model.model_path, histograms=False)(frames, SilentProgress()), "minmax", 99.99)
    assert {name: entry["amax"] for name, entry in union.items()} == artifacts.amax()


def dark_recording(folder: Path, gain: float = 0.15) -> str:
    """Every 10th frame of vtest.avi at `gain` of its brightness (an underexposed camera), as BMPs: images://."""
    folder.mkdir(parents=True)
    capture = cv2.VideoCapture(str(VTEST))
    index = 0
    while capture.grab():  # every frame is decoded in turn; only the kept ones are converted to pixels
        if index % 10 == 0:
            ok, image = capture.retrieve()
            assert ok, f"{VTEST}: frame {index} decoded but not retrieved"
            dark = (image.astype(np.float32) * gain).astype(np.uint8)
            # Lossless, as PNG is, without its compression: ~1 ms a frame to write and read where PNG (level 1) took ~37 ms to
            # write and ~14 ms to read (the same pixels, so the same frames for the gate).
            cv2.imwrite(str(folder / f"{index:04d}.bmp"), dark)
        index += 1
    return f"images://assets/{folder.name}"


def shared_two_camera_int8(tmp_path_factory, rear: str) -> Path:
    """Built once per run for every test that calibrates the same two cameras (16 + 16 frames; front vtest.avi):
    `rear="tree"` (tree.avi): `p.yaml`, and `cache/` with its preparation, calibration and the default gate's verdict
    (made by the product, Int8ForDeploy, as any first run makes them); `rear="dark"` (vtest.avi underexposed,
    `assets/dark`): `p.yaml`, and `cache/` with its preparation and calibration. Read only: a test copies `cache/`
    (content keys find its entries) before it adds to it."""
    from tests.conftest import shared_folder

    def build(folder: Path) -> None:
        if rear == "dark":
            shutil.copytree(shared_dark_recording(tmp_path_factory), folder / "assets" / "dark")
        camera = {"uri": "images://assets/dark"} if rear == "dark" else TREE_REAR
        pipeline = load_pipeline(two_cameras(folder, rear=camera, frames=16, holdout_frames=16))
        shutil.copytree(shared_prepared(tmp_path_factory), folder / "cache")  # the one-frame preparation: found, not redone
        model = PrepareModel(pipeline, folder / "cache")()
        if rear == "dark":
            Calibrate(pipeline, model, folder / "cache")()
        else:
            Int8ForDeploy(pipeline, model, folder / "cache")()

    return shared_folder(tmp_path_factory, f"multicam-int8-16-frames-{rear}", build)


def shared_dark_recording(tmp_path_factory) -> Path:
    """dark_recording's images, written once per run (decoding the whole clip each time cost seconds): copy, never write."""
    from tests.conftest import shared_folder

    return shared_folder(tmp_path_factory, "multicam-dark-recording", lambda folder: dark_recording(folder / "dark")) / "dark"


@pytest.mark.slow
def test_the_gate_judges_each_camera_and_names_the_one_that_fails(tmp_path, tmp_path_factory):
    shared = {rear: shared_two_camera_int8(tmp_path_factory, rear) for rear in ("tree", "dark")}
    for folder in shared.values():
        shutil.copytree(folder / "cache", tmp_path / "cache", dirs_exist_ok=True)
    # Two real recordings: the gate passes overall and on each camera.
    passing = load_pipeline(shared["tree"] / "p.yaml")
    model = PrepareModel(passing, tmp_path / "cache")()
    choice = Int8ForDeploy(passing, model, tmp_path / "cache")()
    report = choice.accuracy
    assert report["passed"] and set(report["cameras"]) == {"front", "rear"}
    assert report["cameras"]["front"]["frames"] == report["cameras"]["rear"]["frames"] == 8
    assert report["cameras"]["front"]["fp32_detections"] + report["cameras"]["rear"]["fp32_detections"] == report["fp32_detections"]
    assert all(camera["passed"] and camera["recall"] >= 0.9 for camera in report["cameras"].values())
    # An underexposed rear camera: its activations use a sliver of the ranges the bright camera sets, so INT8 loses
    # its people; all frames together still pass (recall 0.905), the rear camera alone does not, and is named.
    failing = load_pipeline(shared["dark"] / "p.yaml")
    assert failing.spec.cameras["rear"].uri == "images://assets/dark"
    step = Int8ForDeploy(failing, model, tmp_path / "cache")
    with pytest.raises(ModelError, match=r"fails the accuracy gate on 16 held-out frames: camera rear: detection recall 0\.77") as raised:
        step()
    assert "camera front" not in raised.value.message and "\n" not in raised.value.message
    judged = json.loads((step.judged_folder / "accuracy.json").read_text())["report"]
    assert judged["recall"] >= 0.9  # the aggregate alone would have passed
    assert judged["cameras"]["front"]["passed"] and not judged["cameras"]["rear"]["passed"]
    assert judged["cameras"]["rear"]["failures"][0].startswith("detection recall 0.77")


@pytest.mark.slow
def test_batched_cameras_deploy_the_judged_ranges_on_the_batched_model(tmp_path, tmp_path_factory):
    # The one-frame calibration and its verdict are the shared ones (the same content keys); the batched preparation
    # and its Q/DQ model are made here.
    shutil.copytree(shared_two_camera_int8(tmp_path_factory, "tree") / "cache", tmp_path / "cache")
    path = two_cameras(tmp_path / "p", rear=TREE_REAR, batch="cameras", frames=16, holdout_frames=16)
    pipeline = load_pipeline(path)
    batched = PrepareModel(pipeline, tmp_path / "cache")()
    choice = Int8ForDeploy(pipeline, batched, tmp_path / "cache")()
    assert choice.accuracy["passed"] and set(choice.accuracy["cameras"]) == {"front", "rear"}
    # Calibrated on the one-frame-per-call preparation: the same calibration as batch.size 1.
    single = one_frame_per_call(pipeline)
    assert single.spec.batch_size == 1 and single.spec.prepared_inputs() == {"Preprocessor/sub:0": (1, 3, 300, 300)}
    unbatched = load_pipeline(two_cameras(tmp_path / "p", rear=TREE_REAR, batch=1, frames=16, holdout_frames=16))
    assert Calibrate(unbatched, PrepareModel(unbatched, tmp_path / "cache")(), tmp_path / "cache")().folder == choice.calibration.folder
    # The deployed Q/DQ model takes the batch of two and gives each frame what the judged one-frame model gives it.
    frames = [tensor for _, tensor in iter_preprocessed_frames(unbatched, {0, 30}, (1, 3, 300, 300))]
    run_batched = ort.InferenceSession(str(choice.qdq_model), providers=["CPUExecutionProvider"])
    run_single = ort.InferenceSession(str(choice.calibration.qdq_model), providers=["CPUExecutionProvider"])
    together = run_batched.run(None, {"Preprocessor/sub:0": np.concatenate(frames)})
    for slot, frame in enumerate(frames):
        for joint, alone in zip(together, run_single.run(None, {"Preprocessor/sub:0": frame}), strict=True):
            np.testing.assert_allclose(joint[slot], alone[0], rtol=0, atol=1e-5)


def test_calibrate_itself_takes_the_one_frame_model(tmp_path):
    pipeline = load_pipeline(two_cameras(tmp_path, batch="cameras"), check_files=False)
    with pytest.raises(ConfigError, match="Calibrate takes the model prepared for one frame per call"):
        Calibrate(pipeline, None, tmp_path / "cache")


@pytest.mark.slow
def test_sdk_calibrate_reports_each_camera(tmp_path, tmp_path_factory, monkeypatch, capfd):
    from tools.cli import run

    # In this process (the CLI's own error boundary; the process boundary is not what this is about), on a state whose
    # cache holds the shared calibration and verdict: the report is the command's, made from them.
    shared = shared_two_camera_int8(tmp_path_factory, "tree")
    shutil.copytree(shared / "cache", tmp_path / "state" / "cache")
    monkeypatch.setenv("SDK_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("COLUMNS", "200")
    capfd.readouterr()
    status = run(["calibrate", str(shared / "p.yaml"), "--out", str(tmp_path / "out")])
    stdout, stderr = capfd.readouterr()
    assert status == 0, stderr
    assert "frames per camera: front 8 + 8 held out, rear 8 + 8 held out" in stdout
    assert "camera front: 8 frames" in stdout and "camera rear: 8 frames" in stdout
    report = json.loads((tmp_path / "out" / "accuracy.json").read_text())
    assert report["passed"] and {name: camera["frames"] for name, camera in report["cameras"].items()} == {"front": 8, "rear": 8}
    assert json.loads((tmp_path / "out" / "ranges.json").read_text())["cameras"]["rear"] == {"frames": 8, "holdout_frames": 8, "source_frames": 68}
