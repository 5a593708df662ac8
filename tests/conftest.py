"""Shared fixtures: the real assets, the example pipeline, a prepared model cached once per session, and a tiny real pipeline."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper, save

REPO = Path(__file__).resolve().parents[1]
SHARED_ASSETS = REPO.parent / "shared" / "assets"
EXAMPLE = REPO / "pipelines" / "pedestrian.yaml"


def asset(name: str) -> Path:
    """The real asset from ../shared/assets (as CI has it), else the example's own copy."""
    for folder in (SHARED_ASSETS, REPO / "pipelines" / "assets"):
        if (folder / name).is_file():
            return folder / name
    pytest.skip(f"asset {name} not found")


@pytest.fixture(scope="session")
def video_path() -> Path:
    return asset("vtest.avi")


@pytest.fixture(scope="session")
def detector_path() -> Path:
    return asset("ssdlite_pedestrian.onnx")


@pytest.fixture(scope="session")
def example_pipeline():
    from sdk.spec import load_pipeline

    return load_pipeline(EXAMPLE)


@pytest.fixture(scope="session")
def prepared_example(example_pipeline, tmp_path_factory):
    from tools.prepare import PrepareModel

    return PrepareModel(example_pipeline, tmp_path_factory.mktemp("cache"))()


@pytest.fixture()
def state_dir(tmp_path, monkeypatch) -> Path:
    """Host state (cache, local target) in a fresh folder for this test."""
    folder = tmp_path / "state"
    monkeypatch.setenv("SDK_STATE_DIR", str(folder))
    return folder

# Three candidates in v5 layout (cx, cy, w, h, objectness, car, person) in 32 x 32 network pixels.
ROWS = np.array([[8, 8, 4, 4, 0.9, 0.1, 0.9], [24, 20, 6, 8, 0.8, 0.9, 0.1], [16, 16, 2, 2, 0.1, 0.5, 0.5]], np.float32)


def tiny_yolo(path: Path) -> Path:
    """Output = the constant rows + 0 * sum(input): input-dependent in the graph, constant in value."""
    graph = helper.make_graph(
        [
            helper.make_node("ReduceSum", ["images"], ["total"], keepdims=0),
            helper.make_node("Mul", ["total", "zero"], ["nothing"]),
            helper.make_node("Add", ["rows", "nothing"], ["output0"]),
        ],
        "tiny_yolo",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, 32, 32])],
        [helper.make_tensor_value_info("output0", TensorProto.FLOAT, [1, 3, 7])],
        initializer=[numpy_helper.from_array(ROWS[None], "rows"), numpy_helper.from_array(np.array(0, np.float32), "zero")],
    )
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), str(path))
    return path


PIPELINE = """\
version: 1
name: tiny
source:
  uri: "{uri}"
  replay: {{rate_fps: {rate}}}
preprocess:
  resize: {{width: 32, height: 32}}
  normalize: {{scale: 0.00392156862745098}}
model:
  path: tiny.onnx
  threads: 1
postprocess:
  decoder: {{kind: yolo, output: output0, layout: v5}}
  classes: [car, person]
  score_threshold: 0.25
sinks:
  - {{kind: jsonl}}
  - {{kind: null}}
budgets:
  warmup_frames: 2
  end_to_end: {{p50_ms: 1000, max_ms: {max_ms}}}
"""


@pytest.fixture()
def tiny_pipeline(tmp_path):
    """(PipelineFile, ModelArtifacts) for a synthetic 64 x 48 source of `frames` frames."""
    from sdk.spec import load_pipeline
    from tools.prepare import PrepareModel

    def build(frames: int = 20, rate: str = "null", uri: str | None = None, max_ms: float = 5000):
        folder = tmp_path / "pipeline"
        folder.mkdir(exist_ok=True)
        tiny_yolo(folder / "tiny.onnx")
        text = PIPELINE.format(uri=uri or f"synthetic://boxes?width=64&height=48&frames={frames}", rate=rate, max_ms=max_ms)
        (folder / "tiny.yaml").write_text(text)
        pipeline = load_pipeline(folder / "tiny.yaml")
        return pipeline, PrepareModel(pipeline, tmp_path / "cache")()

    return build


@pytest.fixture()
def postprocess_hook(monkeypatch):
    """A test stage: the real decoder, after `hook(call)` (1-based) runs before each call: sleep to stall, raise to fail."""
    import sdk.runtime.runner as runner_module
    from sdk.stage import Stage

    def install(hook) -> None:
        original = runner_module.create_postprocessor

        def wrapped(*args, **kwargs):
            real = original(*args, **kwargs)

            class Hooked(Stage):
                calls = 0

                def __call__(self, geometry):
                    Hooked.calls += 1
                    hook(Hooked.calls)
                    return real(geometry)

            return Hooked()

        monkeypatch.setattr(runner_module, "create_postprocessor", wrapped)

    return install
