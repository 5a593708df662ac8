"""Several cameras on the CUDA path, emulated (SDK_CUDA_EMULATION=host): each camera's fused kernel writes its
batch slot of the engine's input binding on the one stream, one engine call a batch, the decode kernel per slot
(decision 0460); per camera the CPU path's detections, batched (batch.size: cameras) and one after another (1)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from sdk.postprocess.compare import matched_share
from sdk.runtime import PipelineRunner
from sdk.runtime.report import build_report
from sdk.spec import load_pipeline
from tests.sdk.runtime.test_multicam import CROP, pedestrian
from tools.models.prepare import PrepareModel

# Two recordings of other sizes, and the walkway again through its own crop: three slots, three plans; slot 1
# (tree.avi) finds nothing, so a slot read or written at the wrong offset shows as the others' detections there.
# The cropped one ends after 5 frames: later batches have its slot empty (neither written nor decoded, as on the CPU).
CAMERAS = {"front": {"file": "vtest.avi"}, "rear": {"file": "tree.avi"}, "left": {"file": "vtest.avi", "crop": CROP, "frames": 5}}
FRAMES = 8  # the walkway's first 8 frames hold 21 people; 3 batches after the cropped camera's end


def pipeline_file(folder: Path, device: str, batch: str | int, cameras: dict | None = None) -> Path:
    # Recordings are read as fast as they decode: a long wait keeps every batch whole however loaded the machine is (the
    # 20 ms default lets a slow reader's frame fall into a batch of its own, one engine call more).
    path = pedestrian(folder, cameras or CAMERAS, frames=FRAMES, batch={"size": batch, "wait_ms": 5000})
    doc = yaml.safe_load(path.read_text())
    doc["preprocess"]["device"] = device
    doc["sinks"] = [{"kind": "jsonl"}]
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def run(path: Path, out: Path, cache: Path, monkeypatch, emulate: bool):
    if emulate:
        monkeypatch.setenv("SDK_CUDA_EMULATION", "host")
    else:
        monkeypatch.delenv("SDK_CUDA_EMULATION", raising=False)
    pipeline = load_pipeline(path)
    result = PipelineRunner(pipeline, PrepareModel(pipeline, cache)(), out).run()
    lines = [json.loads(line) for line in (out / "detections.jsonl").read_text().splitlines()]
    return result, build_report(pipeline, result, target="local"), lines


def of(lines: list[dict], camera: str) -> list[dict]:
    return [line for line in lines if line["camera"] == camera]


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    """The module's host cache: each prepared model (batch 1, batch 3) prepared once, as a host's cache keeps it."""
    return tmp_path_factory.mktemp("cuda-cameras-cache")


@pytest.fixture(scope="module")
def auto_batched(tmp_path_factory, cache):
    """`preprocess.device: auto` with the emulation asked for and several cameras, batched: the CPU path (auto never
    chooses the emulated device). The auto test reads its report; the batched CUDA case compares with its detections,
    the CPU path's with the same batches, instead of a run of its own with `device: cpu`."""
    folder = tmp_path_factory.mktemp("auto")
    with pytest.MonkeyPatch.context() as patch:
        return run(pipeline_file(folder / "auto", "auto", "cameras"), folder / "out", cache, patch, emulate=True)


@pytest.mark.slow
@pytest.mark.xdist_group("cuda-cameras")  # the module's cache and CPU run: one worker
@pytest.mark.parametrize(
    ("batch", "front_format"), [("cameras", "bgr8"), (1, "bgr8"), ("cameras", "nv12")], ids=["batched", "one-after-another", "nv12-beside-bgr"]
)
def test_each_camera_on_the_emulated_cuda_path_gives_its_cpu_detections(tmp_path, monkeypatch, cache, auto_batched, batch, front_format):
    cameras = {**CAMERAS, "front": {"file": "vtest.avi?format=nv12"}} if front_format == "nv12" else CAMERAS
    if (batch, front_format) == ("cameras", "bgr8"):
        cpu_result, cpu_report, cpu = auto_batched  # the same pipeline on the CPU path, batched
        assert cpu_report["preprocess"]["device"] == "cpu"
    else:
        cpu_result, _, cpu = run(pipeline_file(tmp_path / "cpu", "cpu", batch, cameras), tmp_path / "cpu-out", cache, monkeypatch, emulate=False)
    result, report, gpu = run(pipeline_file(tmp_path / "cuda", "cuda", batch, cameras), tmp_path / "cuda-out", cache, monkeypatch, emulate=True)
    expected = len(CAMERAS) if batch == "cameras" else 1
    assert result.batch == cpu_result.batch == expected
    assert report["batching"]["frames_per_call"] == expected
    section = report["preprocess"]
    assert (section["device"], section["emulated"]) == ("cuda", True)
    assert {name: (camera["slot"], camera["kernel"]) for name, camera in section["cameras"].items()} == {
        "front": (0, f"pp_{front_format}_f32_nchw"),  # each camera its own kernel and parameter block
        "rear": (1 if batch == "cameras" else 0, "pp_bgr8_f32_nchw"),
        "left": (2 if batch == "cameras" else 0, "pp_bgr8_f32_nchw"),
    }
    assert section["decode"]["device"] == "cuda" and section["decode"]["overflow_frames"] == 0
    frames = sum(camera.get("frames", FRAMES) for camera in CAMERAS.values())
    calls = FRAMES if batch == "cameras" else frames  # engine calls: one a batch, or one a frame
    assert section["event_ms"]["preprocess"]["frames"] == frames
    assert section["event_ms"]["infer"]["frames"] == calls
    assert section["event_ms"]["decode"]["frames"] == frames
    for camera, spec in CAMERAS.items():
        assert len(of(gpu, camera)) == spec.get("frames", FRAMES)
        share, total = matched_share(of(gpu, camera), of(cpu, camera))
        assert share >= 0.99, (camera, share, total)
    assert matched_share(of(gpu, "front"), of(cpu, "front"))[1] > 15  # people on the walkway: not vacuous
    assert matched_share(of(gpu, "left"), of(cpu, "left"))[1] > 5
    left, front = ([line["detections"] for line in of(cpu, name)][:5] for name in ("left", "front"))
    assert len(left) == 5 and left != front  # the same frames through the crop give other boxes: each slot its own plan


@pytest.mark.xdist_group("cuda-cameras")
def test_auto_with_several_cameras_and_no_gpu_says_why(auto_batched):
    result, report, lines = auto_batched
    assert report["preprocess"]["device"] == "cpu"
    assert report["preprocess"]["reason"] == "no CUDA device"  # no longer "several cameras": the CUDA path takes them
    assert "cameras" not in report["preprocess"] and len(lines) == sum(camera.get("frames", FRAMES) for camera in CAMERAS.values())


@pytest.mark.xdist_group("cuda-cameras")
def test_cuda_with_several_cameras_and_no_gpu_is_one_error_naming_the_file(tmp_path, monkeypatch, cache):
    from sdk.errors import BackendError

    with pytest.raises(BackendError) as info:
        run(pipeline_file(tmp_path / "cuda", "cuda", "cameras"), tmp_path / "out", cache, monkeypatch, emulate=False)
    assert "p.yaml: preprocess.device: cuda, but no CUDA device" in info.value.message  # no longer "several cameras"
    assert "SDK_CUDA_EMULATION=host" in info.value.hint
