"""The CUDA path of the runtime, emulated (SDK_CUDA_EMULATION=host): the real wiring on host buffers.

The same runner, preprocessing stage, engine bindings, decode stage and event timing as on a GPU,
with the kernels' numpy twins; its detections on the real video against the CPU path's. The real
path (kernel into a TensorRT binding on a GPU) is in tests/plugins_cuda/test_gpu.py, marked `gpu`.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper, save

from sdk.errors import BackendError
from sdk.postprocess.compare import matched_share
from sdk.runtime import PipelineRunner
from sdk.spec import load_pipeline

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "pipelines" / "pedestrian.yaml"
FRAMES = 24


def run(pipeline_path: Path, artifacts, out: Path, monkeypatch, emulate: bool):
    if emulate:
        monkeypatch.setenv("SDK_CUDA_EMULATION", "host")
    else:
        monkeypatch.delenv("SDK_CUDA_EMULATION", raising=False)
    result = PipelineRunner(load_pipeline(pipeline_path, check_files=False), artifacts, out, max_frames=FRAMES).run()
    lines = [json.loads(line) for line in (out / "detections.jsonl").read_text().splitlines()]
    return result, lines


def pedestrian(tmp_path: Path, device: str, video_path: Path) -> Path:
    (tmp_path / "assets").mkdir(exist_ok=True)
    if not (tmp_path / "assets" / "vtest.avi").exists():
        shutil.copy(video_path, tmp_path / "assets" / "vtest.avi")
    text = EXAMPLE.read_text().replace("  dtype: float32\n", f"  dtype: float32\n  device: {device}\n", 1)
    text = text.replace("    rate_fps: 30 ", "    rate_fps: null ")
    text = text.replace("  - {kind: video, path: annotated.mp4}   # MPEG-4 part 2, plays everywhere\n", "")
    path = tmp_path / f"pedestrian_{device}.yaml"
    path.write_text(text)
    return path


def test_emulated_cuda_path_gives_the_cpu_paths_ssd_detections(tmp_path, monkeypatch, prepared_example, video_path):
    cpu_result, cpu = run(pedestrian(tmp_path, "cpu", video_path), prepared_example, tmp_path / "cpu", monkeypatch, emulate=False)
    cuda_result, gpu = run(pedestrian(tmp_path, "cuda", video_path), prepared_example, tmp_path / "cuda", monkeypatch, emulate=True)
    assert cpu_result.preprocess["device"] == "cpu" and cpu_result.preprocess["reason"] == "preprocess.device is cpu"
    section = cuda_result.preprocess
    assert (section["device"], section["emulated"], section["kernel"]) == ("cuda", True, "pp_bgr8_f32_nchw")
    assert section["decode"]["device"] == "cuda" and section["decode"]["overflow_frames"] == 0
    # Stage times from the (emulated) events, one per frame and stage.
    assert {stage: times["frames"] for stage, times in section["event_ms"].items()} == {"preprocess": FRAMES, "infer": FRAMES, "decode": FRAMES}
    assert all(times["max_ms"] >= times["mean_ms"] > 0 for times in section["event_ms"].values())
    share, total = matched_share(gpu, cpu)
    assert total > 30 and share >= 0.99, (share, total)


def tiny_grid_yolo(path: Path) -> Path:
    """A YOLO v5 head whose scores are the frame's own pixels: 8 x 8 cells of a 64 x 64 input, objectness = mean R,
    class scores = mean G and mean B of the cell, boxes fixed per cell (12 x 12 around its centre)."""
    cells = np.array([[8 * (k % 8) + 4, 8 * (k // 8) + 4, 12, 12] for k in range(64)], np.float32)[None]
    graph = helper.make_graph(
        [
            helper.make_node("AveragePool", ["images"], ["pooled"], kernel_shape=[8, 8], strides=[8, 8]),
            helper.make_node("Reshape", ["pooled", "shape"], ["flat"]),
            helper.make_node("Transpose", ["flat"], ["scores"], perm=[0, 2, 1]),
            helper.make_node("Concat", ["boxes", "scores"], ["output0"], axis=2),
        ],
        "grid_yolo",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, 64, 64])],
        [helper.make_tensor_value_info("output0", TensorProto.FLOAT, [1, 64, 7])],
        initializer=[numpy_helper.from_array(cells, "boxes"), numpy_helper.from_array(np.array([1, 3, 64], np.int64), "shape")],
    )
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), str(path))
    return path


YOLO = """\
version: 1
name: grid
source:
  uri: "file://vtest.avi"
  replay: {{rate_fps: null}}
preprocess:
  resize: {{width: 64, height: 64, mode: letterbox}}
  normalize: {{scale: 0.00392156862745098}}
  device: {device}
model:
  path: grid.onnx
  threads: 1
postprocess:
  decoder: {{kind: yolo, output: output0, layout: v5}}
  classes: [a, b]
  score_threshold: 0.2
  iou_threshold: 0.5
  max_detections: 100
sinks:
  - {{kind: jsonl}}
"""


@pytest.fixture()
def yolo_pipeline(tmp_path, video_path):
    from tools.models.prepare import PrepareModel

    tiny_grid_yolo(tmp_path / "grid.onnx")
    shutil.copy(video_path, tmp_path / "vtest.avi")
    paths = {}
    for device in ("cpu", "cuda", "auto"):
        paths[device] = tmp_path / f"grid_{device}.yaml"
        paths[device].write_text(YOLO.format(device=device))
    return paths, PrepareModel(load_pipeline(paths["cpu"]), tmp_path / "cache")()


def test_emulated_cuda_path_gives_the_cpu_paths_yolo_detections(tmp_path, monkeypatch, yolo_pipeline):
    paths, artifacts = yolo_pipeline
    _, cpu = run(paths["cpu"], artifacts, tmp_path / "cpu", monkeypatch, emulate=False)
    result, gpu = run(paths["cuda"], artifacts, tmp_path / "cuda", monkeypatch, emulate=True)
    assert result.preprocess["decode"]["kernel"] == "yolo_decode" and result.preprocess["kernel"] == "pp_bgr8_f32_nchw"
    share, total = matched_share(gpu, cpu)
    assert total > 100 and share >= 0.99, (share, total)


def test_auto_falls_back_to_the_cpu_and_says_why(tmp_path, monkeypatch, yolo_pipeline):
    paths, artifacts = yolo_pipeline
    result, _ = run(paths["auto"], artifacts, tmp_path / "auto", monkeypatch, emulate=True)  # auto never emulates
    section = result.preprocess
    assert (section["device"], section["emulated"]) == ("cpu", False)
    assert section["reason"] == "no CUDA device" and "auto never emulates" in section["detail"]


def test_cuda_without_a_gpu_is_an_error_naming_the_file(tmp_path, monkeypatch, yolo_pipeline):
    paths, artifacts = yolo_pipeline
    monkeypatch.delenv("SDK_CUDA_EMULATION", raising=False)
    with pytest.raises(BackendError) as caught:
        PipelineRunner(load_pipeline(paths["cuda"], check_files=False), artifacts, tmp_path / "out", max_frames=2).run()
    assert str(paths["cuda"]) in caught.value.message and "preprocess.device: cuda, but no CUDA device" in caught.value.message
    assert "auto or cpu" in caught.value.message and caught.value.hint


def test_a_bad_emulation_value_is_refused(tmp_path, monkeypatch, yolo_pipeline):
    from sdk.errors import ConfigError

    paths, artifacts = yolo_pipeline
    monkeypatch.setenv("SDK_CUDA_EMULATION", "gpu")
    with pytest.raises(ConfigError, match="SDK_CUDA_EMULATION='gpu': allowed: host"):
        PipelineRunner(load_pipeline(paths["cuda"], check_files=False), artifacts, tmp_path / "out", max_frames=2).run()
