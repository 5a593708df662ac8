"""The INT8 sensitivity ranking (tools/int8/sensitivity.py) on the real detector and ONNX Runtime: what it
computes must not depend on how cheaply it is computed."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort

from sdk.backends.onnxruntime_cpu import session_options
from tests.tools.int8.test_calibrate import shared_calibration
from tools.int8.calibrate import write_qdq
from tools.int8.sensitivity import FallbackToFp16, _cosines


def test_the_ranking_equals_quantizing_each_layer_alone_with_quantize_static(tmp_path, tmp_path_factory, monkeypatch):
    """Per layer, the plain path: `write_qdq(only=[layer])` (its own weight scales), a session with the runtime's
    options, its cosine loss. The ranking (weight scales computed once, sessions that do not spin) gives the
    very same numbers, bit for bit, for the stem, the first depthwise convolution and the last box predictor."""
    pipeline, model, artifacts = shared_calibration(tmp_path_factory, "minmax")
    convs = [n.name for n in onnx.load(str(model.model_path), load_external_data=False).graph.node if n.op_type == "Conv"]
    layers = [convs[0], convs[1], convs[-1]]
    rng = np.random.default_rng(0)
    frames = [rng.uniform(-1, 1, (1, 3, 300, 300)).astype(np.float32) for _ in range(2)]

    def outputs(path) -> list[list[np.ndarray]]:
        session = ort.InferenceSession(str(path), session_options(), providers=["CPUExecutionProvider"])
        return [session.run(None, {session.get_inputs()[0].name: frame}) for frame in frames]

    reference = outputs(model.model_path)
    expected = []
    for layer in layers:
        write_qdq(model.model_path, tmp_path / "one.onnx", artifacts.onnxruntime_ranges, "minmax", only=[layer])
        expected.append((layer, round(1.0 - _cosines(outputs(tmp_path / "one.onnx"), reference), 8)))

    (tmp_path / "search").mkdir()
    search = FallbackToFp16(pipeline, model, artifacts, tmp_path / "search")
    monkeypatch.setattr(search, "layers", lambda: layers)
    ranking = search.rank(frames)
    assert ranking == sorted(expected, key=lambda item: -item[1])
    assert all(cost > 0 for _, cost in ranking)  # each layer alone does cost something: the numbers are not trivially equal
