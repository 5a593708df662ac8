"""The accuracy gate's detection checks at their boundaries, each the only check that refuses (tools/int8/accuracy.py,
what `sdk calibrate`, deploy's INT8 step and `sdk optimize` judge their candidates by): real ONNX Runtime sessions of
two small detectors whose outputs are constant rows (ten well-separated people), the candidate differing from the
FP32 model only in which rows it finds. Raw outputs stay within the cosine bound and matched scores do not drift,
so recall (or precision) alone decides.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from sdk.spec.schema import AccuracyGate
from tests.conftest import PIPELINE
from tools.int8.accuracy import evaluate_int8

PEOPLE = 10
GATE = AccuracyGate(min_cosine=0.99, min_recall=0.9, min_precision=0.9, max_mean_score_drift=0.05)


def rows(found: int, extra: int = 0) -> np.ndarray:
    """v5 rows (cx, cy, w, h, objectness, car, person) in 32 x 32 network pixels: PEOPLE people on a grid, the first
    `found` of them with their objectness (the others at 0: not found), then two more places, `extra` of them people
    FP32 does not see. Every model has the same rows but for objectness: the raw outputs stay close."""
    out = []
    for k in range(PEOPLE + 2):
        seen = k < found or PEOPLE <= k < PEOPLE + extra
        out.append([4 + 8 * (k % 4), 4 + 8 * (k // 4), 4, 4, 0.9 if seen else 0.0, 0.1, 0.9])
    return np.asarray(out, np.float32)


def constant_model(path, values: np.ndarray):
    from onnx import TensorProto, helper, numpy_helper, save

    graph = helper.make_graph(
        [
            helper.make_node("ReduceSum", ["images"], ["total"], keepdims=0),
            helper.make_node("Mul", ["total", "zero"], ["nothing"]),
            helper.make_node("Add", ["rows", "nothing"], ["output0"]),
        ],
        "constant_rows",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, 32, 32])],
        [helper.make_tensor_value_info("output0", TensorProto.FLOAT, [1, len(values), 7])],
        initializer=[numpy_helper.from_array(values[None], "rows"), numpy_helper.from_array(np.array(0, np.float32), "zero")],
    )
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), str(path))
    return path


@pytest.fixture(scope="module")
def fp32(tmp_path_factory):
    import cv2

    from sdk.spec import load_pipeline
    from tools.models.prepare import PrepareModel

    folder = tmp_path_factory.mktemp("gate")
    constant_model(folder / "tiny.onnx", rows(PEOPLE))
    (folder / "frames").mkdir()
    for k in range(4):  # the recording the held-out frames come from (the gate maps boxes back to its pixels)
        cv2.imwrite(str(folder / "frames" / f"{k:03d}.png"), np.full((48, 64, 3), 40 * k, np.uint8))
    (folder / "tiny.yaml").write_text(PIPELINE.format(uri="images://frames", rate="null", max_ms=5000))
    pipeline = load_pipeline(folder / "tiny.yaml")
    return pipeline, PrepareModel(pipeline, folder / "cache")(), folder


def judge(fp32, candidate: np.ndarray, label: str = "INT8"):
    pipeline, artifacts, folder = fp32
    model = constant_model(folder / f"candidate-{hashlib.sha256(candidate.tobytes()).hexdigest()[:16]}.onnx", candidate)
    frames = {k: np.zeros((1, 3, 32, 32), np.float32) for k in range(4)}
    return evaluate_int8(pipeline, artifacts, model, frames, GATE, label=label)


def test_the_same_detections_pass(fp32):
    report = judge(fp32, rows(PEOPLE))
    assert report.passed and (report.recall, report.precision, report.fp32_detections) == (1.0, 1.0, 4 * PEOPLE)


def test_recall_at_the_bound_passes_and_just_below_it_alone_fails(fp32):
    at = judge(fp32, rows(PEOPLE - 1))  # 9 of 10 found: recall 0.9, the bound itself
    assert at.recall == 0.9 and at.precision == 1.0 and at.passed, at.failures
    below = judge(fp32, rows(PEOPLE - 2))  # 8 of 10: recall 0.8
    assert below.precision == 1.0 and below.mean_score_drift == 0.0 and min(o["mean_cosine"] for o in below.outputs.values()) > 0.99
    assert below.failures == ["detection recall 0.800 < 0.9 (32 of 40 FP32 detections found)"]


def test_precision_at_the_bound_passes_and_below_it_alone_fails(fp32):
    extra = judge(fp32, rows(PEOPLE, extra=2), label="optimized")  # all 10 found, and 2 more: precision 10 / 12
    assert extra.recall == 1.0 and min(o["mean_cosine"] for o in extra.outputs.values()) > 0.99
    assert extra.failures == ["detection precision 0.833 < 0.9 (40 of 48 optimized detections match)"]


def test_a_person_found_as_a_car_in_the_same_place_is_no_match(fp32):
    swapped = rows(PEOPLE)
    swapped[:2, 5:7] = swapped[:2, 6:4:-1]  # the first two people come back as cars, same boxes, same scores
    report = judge(fp32, swapped)
    assert (report.recall, report.precision) == (0.8, 0.8) and min(o["mean_cosine"] for o in report.outputs.values()) > 0.99
    assert report.failures == [
        "detection recall 0.800 < 0.9 (32 of 40 FP32 detections found)",
        "detection precision 0.800 < 0.9 (32 of 40 INT8 detections match)",
    ]
