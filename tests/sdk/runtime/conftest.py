"""A small real pipeline for runtime tests: synthetic frames, a tiny YOLO-layout ONNX model, real ORT."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper, save

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
