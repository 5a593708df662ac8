"""`model.precision: int8` on deploy: calibrated once on the host, gated on accuracy, run as Q/DQ on the CPU."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from sdk.errors import ModelError
from sdk.release import ReleaseManifest
from tools.deploy.flow import Deploy

REPO = Path(__file__).resolve().parents[3]


def int8_pipeline(folder: Path, min_cosine: float = 0.9, fallback: str = "fp16", holdout: int = 6) -> Path:
    """The example with a small min-max calibration (fast: 12 frames, `holdout` held out, which the gate and any
    sensitivity search run on), INT8, relaxed latency budgets, accuracy acceptance on."""
    if not folder.exists():
        shutil.copytree(REPO / "pipelines" / "assets", folder / "assets")
    text = (REPO / "pipelines" / "pedestrian.yaml").read_text()
    text = text.replace("  threads: 2\n", "  threads: 2\n  precision: int8\n")
    text = text.replace("  frames: 300 ", "  frames: 12 ").replace("holdout_frames: 50", f"holdout_frames: {holdout}")
    text = text.replace("stride: 1\n", "stride: 9\n").replace("method: percentile ", "method: minmax ")
    text = text[: text.index("budgets:")] + (
        "budgets:\n  warmup_frames: 2\n  end_to_end: {p50_ms: 60000}\n"
        "  accuracy: {min_recall: 0.5, min_precision: 0.5, min_mean_iou: 0.5, max_mean_score_drift: 0.5}\n"
    )
    gate = f"calibration:\n  accuracy: {{min_cosine: {min_cosine}}}\n  fallback: {fallback}\n  #"
    text = text.replace("calibration:            #", gate, 1)
    (folder / "p.yaml").write_text(text)
    return folder / "p.yaml"


# The gate tests' held-out frames: a sensitivity search costs a Q/DQ model and a session per layer (88) and a run per
# frame, so it runs on 3. Where the all-INT8 model must pass as is, 6: on those 3 the default gate's precision fails
# (16 of 18 INT8 detections match, 0.889 < 0.9) and the search would run.
GATE_FRAMES = 3


def with_shared_calibration(tmp_path_factory, state_dir: Path) -> None:
    """The host cache starts with the example's calibration for int8_pipeline(holdout=GATE_FRAMES) (its frames and
    method; the gate is not part of the key) and the gate's measurements of it (any gate's), made once per run: these
    tests are about the gate, and the first test below shows a deploy calibrating on its own. A copy: the deploy adds
    its verdict and release to it."""
    from sdk.spec import load_pipeline
    from tests.conftest import shared_folder
    from tools.int8.calibrate import Calibrate
    from tools.int8.for_deploy import gate_measurements
    from tools.models.prepare import PrepareModel

    def build(folder: Path) -> None:  # and the gate's measurements of it, which every gate below judges
        pipeline = load_pipeline(int8_pipeline(folder / "p", holdout=GATE_FRAMES))
        model = PrepareModel(pipeline, folder / "cache")()
        gate_measurements(pipeline, model, Calibrate(pipeline, model, folder / "cache")())

    shutil.copytree(shared_folder(tmp_path_factory, "deploy-int8-calibration", build) / "cache", state_dir / "cache")


@pytest.mark.slow
def test_int8_deploy_calibrates_once_ships_the_qdq_model_and_runs_it(tmp_path, state_dir):
    pipeline = int8_pipeline(tmp_path / "p")
    # 8 frames: about 30 FP32 detections of the example's people, to find the INT8 ones among (recall >= 0.5) and to
    # see their scores drift (the device ran the Q/DQ model: a drift of 0 would be FP32).
    first = Deploy(pipeline, "local", frames=8, report_dir=tmp_path / "r1")()
    report = first.report
    assert "INT8 Q/DQ model" in report["backend"] and report["verdict"] == "PASS"
    release = ReleaseManifest.load(state_dir / "targets" / "local" / "current")
    assert {"artifacts/model.qdq.onnx", "artifacts/ranges.json", "artifacts/model.onnx"} <= set(release.files)
    # The device ran INT8, the host reference FP32: close, but not bit-identical.
    accuracy = report["accuracy"]
    assert accuracy["frames"] == 8 and accuracy["reference_detections"] >= 20 and accuracy["recall"] >= 0.5 and 0 < accuracy["mean_score_drift"] < 0.5
    calibrations = list((state_dir / "cache" / "calibration").iterdir())
    (judged,) = calibrations[0].glob("judged-*")  # the gate's verdict, cached with the gate it was judged by
    verdict = json.loads((judged / "accuracy.json").read_text())
    assert len(calibrations) == 1 and verdict["report"]["passed"] and not verdict["fallback_ran"]  # all INT8 passed as is
    stamps = [(path / name).stat().st_mtime_ns for path, name in ((calibrations[0], "model.qdq.onnx"), (judged, "accuracy.json"))]
    # A second deploy's INT8 step (tools.deploy.flow.int8_artifacts, on the host cache, before anything reaches the
    # target; a second deploy's release and run are test_deploy_local.py's): cached, no second calibration or gate.
    from sdk.spec import load_pipeline
    from tools.deploy.flow import int8_artifacts
    from tools.models.prepare import PrepareModel
    from tools.progress import SilentProgress

    again = load_pipeline(pipeline)
    choice = int8_artifacts(again, PrepareModel(again, state_dir / "cache")(), SilentProgress())
    assert choice.calibration.folder == calibrations[0] and choice.qdq_model == calibrations[0] / "model.qdq.onnx"
    assert [(path / name).stat().st_mtime_ns for path, name in ((calibrations[0], "model.qdq.onnx"), (judged, "accuracy.json"))] == stamps
    assert list((state_dir / "cache" / "calibration").iterdir()) == calibrations and list(calibrations[0].glob("judged-*")) == [judged]


@pytest.mark.slow
def test_an_int8_model_that_fails_its_gate_is_never_deployed(tmp_path, tmp_path_factory, state_dir):
    with_shared_calibration(tmp_path_factory, state_dir)
    pipeline = int8_pipeline(tmp_path / "p", min_cosine=0.999999, fallback="none", holdout=GATE_FRAMES)  # the fallback's own test is below
    with pytest.raises(ModelError, match="INT8 fails the accuracy gate on 3 held-out frames: .*cosine similarity"):
        Deploy(pipeline, "local", frames=3, report_dir=tmp_path / "r")()
    assert not (state_dir / "targets" / "local" / "current").exists()  # nothing reached the target
    assert len(list((state_dir / "cache" / "calibration").iterdir())) == 1  # the shared calibration, found by its content key
    with pytest.raises(ModelError, match="INT8 fails the accuracy gate"):  # the verdict is cached with its gate
        Deploy(pipeline, "local", frames=3, report_dir=tmp_path / "r")()


@pytest.mark.slow
def test_a_failing_gate_keeps_the_worst_layers_out_of_int8_until_it_passes(tmp_path, tmp_path_factory, state_dir, monkeypatch):
    """min-max on 12 frames gives box-encoding cosine ~0.9969 on the 3 held-out frames: 0.998 fails all-INT8. The first
    depthwise convolution ranks worst (measured with every one of the 88 layers ranked on those frames) but alone in
    float makes it worse (~0.990); with its neighbours (the stem and its projection) it reaches ~0.9986 and passes.

    The search here ranks 9 of the 88 layers: the first six (the stem, that depthwise convolution, its projection and
    the next block) and every 32nd after them (three, from the middle and the late blocks, for the ranking to order).
    A layer's cost is measured on it alone, so it is the same number in any subset, the worst of the 88 is in it, and
    the search (worst first, the neighbours from the graph) takes the same steps to the same model. That the search
    lists every Conv of the detector is asserted below on `layers()` itself, and that the ranking measures each listed
    layer as the plain path does, in tests/tools/int8/test_sensitivity.py; ranking the other 79 here would cost about
    18 CPU-s a run (each ranked layer: its one-layer Q/DQ model, a session, a run per held-out frame)."""
    from tools.int8.sensitivity import FallbackToFp16

    with_shared_calibration(tmp_path_factory, state_dir)
    every = FallbackToFp16.layers
    listed: list[list[str]] = []  # what the search lists unrestricted

    def some_layers(search) -> list[str]:
        listed.append(every(search))
        return listed[-1][:6] + listed[-1][6::32]

    monkeypatch.setattr(FallbackToFp16, "layers", some_layers)
    pipeline = int8_pipeline(tmp_path / "p", min_cosine=0.998, holdout=GATE_FRAMES)
    result = Deploy(pipeline, "local", frames=3, report_dir=tmp_path / "r")()
    release = ReleaseManifest.load(state_dir / "targets" / "local" / "current")
    assert "artifacts/precision.json" in release.files
    precision = json.loads((state_dir / "targets" / "local" / "current" / "artifacts" / "precision.json").read_text())
    assert precision["passed"] and precision["fp16_layers"] and precision["fp16_layers"][0] == precision["ranking"][0]["layer"]
    assert precision["baseline_cosine"] < 0.998 <= precision["final"]["outputs"]["concat:0"]["mean_cosine"]
    assert sum(1 + len(step["together_with"]) for step in precision["steps"] if step["kept"]) == len(precision["fp16_layers"])
    assert any(step["together_with"] for step in precision["steps"])  # the pair search found it
    ranking = [entry["cosine_loss"] for entry in precision["ranking"]]
    assert ranking == sorted(ranking, reverse=True)  # worst first
    import onnx

    (prepared,) = (state_dir / "cache" / "prepared").glob("*/model.onnx")
    convs = [node.name for node in onnx.load(str(prepared), load_external_data=False).graph.node if node.op_type == "Conv"]
    assert len(listed) == 1 and listed[0] == convs and len(convs) == 88  # unrestricted, the search ranks every Conv of the detector
    assert sorted(entry["layer"] for entry in precision["ranking"]) == sorted(convs[:6] + convs[6::32]) and len(precision["ranking"]) == 9
    # The steps of the search over all 88: the first depthwise convolution worst, in float with the stem and its projection.
    assert precision["ranking"][0]["layer"] == convs[1] and sorted(precision["fp16_layers"]) == sorted(convs[:3])
    judged = next((state_dir / "cache" / "calibration").glob("*/judged-*"))
    assert (judged / "sensitivity.png").stat().st_size > 10_000 and result.report["verdict"] in ("PASS", "INCONCLUSIVE")
