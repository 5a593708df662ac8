"""`sdk optimize` on the example pipeline, kept small (few frames, one plan), and its refusals."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
import yaml

from sdk.errors import EXIT_INCONCLUSIVE
from sdk.spec import load_pipeline
from tools.optimize.candidate import Candidate
from tools.optimize.run import Optimize, Settings, _Context

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def example(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("SDK_HISTORY", str(tmp_path / "history.sqlite"))
    shutil.copytree(REPO / "pipelines", tmp_path / "pipelines")
    return tmp_path / "pipelines" / "pedestrian.yaml"


SMALL = dict(savings=(0.1,), calibration_frames=8, holdout_frames=6, rounds=2, runs=2, sparsity=True)  # six held-out frames hold about 30 people
PLATFORM = "jetson-orin-nano-8gb"  # chosen by the prediction for a module, so the choice does not depend on this machine's clock
CHILD = """import json, sys
from pathlib import Path
from tools.optimize.run import Optimize, Settings
settings = json.loads(sys.argv[2])
settings.update(savings=tuple(settings["savings"]), report_dir=Path(settings["report_dir"]))
sys.exit(Optimize(Path(sys.argv[1]), Settings(**settings))().exit_code)
"""


def optimize_in_a_child(pipeline: Path, report_dir: Path, history: Path) -> dict:
    """`sdk optimize` of the pipeline with SMALL's settings, in a process of its own whose NumPy uses one BLAS thread
    (OPENBLAS_NUM_THREADS is read when NumPy loads): the suite's workers already fill the machine's cores, and BLAS
    threads waiting for each other on a busy machine double the CPU time of the least-squares work. Both runs of the
    bit-identity check go through here, so they run alike. Returns report.json."""
    import os
    import subprocess
    import sys

    settings = {**SMALL, "platform": PLATFORM, "report_dir": str(report_dir)}
    env = {**os.environ, "PYTHONPATH": str(REPO), "OPENBLAS_NUM_THREADS": "1", "SDK_HISTORY": str(history)}
    done = subprocess.run([sys.executable, "-c", CHILD, str(pipeline), json.dumps(settings)], env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=900)  # fmt: skip
    report = json.loads((report_dir / "report.json").read_text()) if (report_dir / "report.json").is_file() else {}
    assert done.returncode == 0, (report.get("verdict"), report.get("notes"), done.stderr[-3000:])
    return report


@pytest.fixture(scope="module")
def optimized(tmp_path_factory) -> tuple[Path, dict]:
    """One `sdk optimize` of a copy of the example (few frames, one plan, every method), shared by the tests that read
    what it wrote: (the example pipeline, report.json). The tests copy the folder before they change anything in it."""
    root = tmp_path_factory.mktemp("optimized")
    shutil.copytree(REPO / "pipelines", root / "pipelines")
    example = root / "pipelines" / "pedestrian.yaml"
    return example, optimize_in_a_child(example, root / "report-0", root / "history.sqlite")


@pytest.mark.xdist_group("optimize-example")  # one worker makes the shared run
def test_optimize_writes_the_front_an_optimized_model_and_a_pipeline_that_uses_it(optimized, prepared_example, tmp_path, monkeypatch):
    example, report = optimized
    assert (example.parent.parent / "report-0" / "report.html").read_text().count("<svg") == 1
    methods = {c["method"] for c in report["candidates"]}
    assert {"magnitude", "reconstruct", "reconstruct+fskd"} <= methods  # the baseline is always beside it
    for c in report["candidates"]:
        assert {"recall", "precision", "mean_iou", "mean_score_drift"} <= set(c["accuracy"])
        assert c["predicted_ms"] < report["original"]["predicted_ms"]
        if "+2:4" not in c["method"]:
            assert c["measured"]["median_ms"] > 0 and len(c["measured"]["rounds_ms"]) == 2
    assert report["front"] and set(report["front"]) <= {c["name"] for c in report["candidates"]}
    assert report["verdict"] == "PASS"  # and the child's exit code was 0 (optimize_in_a_child)
    chosen = next(c for c in report["candidates"] if c["name"] == report["chosen"])
    assert chosen["passed"] and chosen["method"] != "magnitude"
    outputs = report["outputs"]
    assert outputs["changes"]["channels"] == chosen["channels"]
    model = onnx.load(outputs["model"])
    assert json.loads(next(p.value for p in model.metadata_props if p.key == "sdk.optimize"))["candidate"] == chosen["name"]
    optimized_pipeline = load_pipeline(outputs["pipeline"])
    assert optimized_pipeline.model_path == Path(outputs["model"]) and optimized_pipeline.spec.model.reference == "assets/ssdlite_pedestrian.onnx"
    # The optimized pipeline prepares (its anchors are in the optimized model) and its reference is the original.
    from tools.evidence.reference import reference_model
    from tools.models.prepare import PrepareModel

    artifacts = PrepareModel(optimized_pipeline, tmp_path / "cache")()
    assert set(artifacts.load_tensors()) == {"Postprocessor/ExpandDims:0"}
    twin, _ = reference_model(optimized_pipeline, artifacts)
    assert twin.model_path.name == "ssdlite_pedestrian.onnx"
    # What changed travels in the release manifest (signed with it), not only in the report.
    from tools.release.bundle import collect_bundle

    bundle = collect_bundle(optimized_pipeline, artifacts, "key")
    assert bundle.fingerprint["optimize"]["candidate"] == chosen["name"] and bundle.fingerprint["optimize"]["channels"] == chosen["channels"]
    assert "optimize" not in collect_bundle(load_pipeline(example), prepared_example, "key").fingerprint  # the same model, prepared once
    # An accuracy budget is kept (the example has one) or written at the gate's thresholds: every later run of the
    # optimized pipeline is judged against the original's detections. (On a copy: the shared run's folder stays as it was.)
    assert optimized_pipeline.spec.budgets.accuracy == load_pipeline(example).spec.budgets.accuracy
    shutil.copytree(example.parent, tmp_path / "pipelines")
    example = tmp_path / "pipelines" / example.name
    outputs = {key: str(example.parent / Path(outputs[key]).relative_to(Path(report["pipeline_file"]).parent)) for key in ("model", "pipeline")}
    document = yaml.safe_load(example.read_text())
    del document["budgets"]["accuracy"]
    example.write_text(yaml.safe_dump(document))
    from tools.optimize.outputs import write_outputs

    chosen_candidate = Candidate(chosen["name"], chosen["method"], 0.1, onnx.load(outputs["model"]))
    # Killed between the two writes: the pipeline file still names the model it named, which is still there, whole.
    import tools.optimize.outputs as outputs_module

    real_write = outputs_module.write_whole

    def killed_before_the_pipeline(path, data):
        if Path(path).suffix == ".yaml":
            raise KeyboardInterrupt
        return real_write(path, data)

    changed = onnx.load(outputs["model"])
    changed.doc_string = "another candidate"
    before = Path(outputs["model"]).read_bytes()
    with monkeypatch.context() as patch:
        patch.setattr(outputs_module, "write_whole", killed_before_the_pipeline)
        with pytest.raises(KeyboardInterrupt):
            write_outputs(load_pipeline(example), artifacts, Candidate(chosen["name"], chosen["method"], 0.1, changed), report)
    named = load_pipeline(outputs["pipeline"]).model_path
    assert named == Path(outputs["model"]) and named.read_bytes() == before
    written = write_outputs(load_pipeline(example), artifacts, chosen_candidate, report)
    accuracy = load_pipeline(written["pipeline"]).spec.budgets.accuracy
    assert (accuracy.min_recall, accuracy.min_precision) == (report["gate"]["min_recall"], report["gate"]["min_precision"])


@pytest.mark.xdist_group("optimize-example")
def test_the_optimized_model_is_the_same_bits_twice_and_deploys_judged_against_the_original(optimized, tmp_path, monkeypatch, sdk_fd):
    """A second run on the same inputs writes the bit-identical model (every method, FSKD and 2:4 included); the
    pipeline written beside it deploys, its accuracy judged against the original model's FP32 detections."""
    example, first = optimized
    # The session's host state, as the first run had it: a user's second run finds the prepared model in the cache
    # (keyed by the model's content), so both runs start from the same prepared model and only the optimization repeats.
    second = optimize_in_a_child(example, tmp_path / "report-1", tmp_path / "history.sqlite")
    monkeypatch.setenv("SDK_STATE_DIR", str(tmp_path / "state"))  # the deploy's own host state: its release is found below
    outputs = second["outputs"]
    assert second["chosen"] == first["chosen"] and Path(outputs["model"]).read_bytes() == Path(first["outputs"]["model"]).read_bytes()
    assert len(list(example.with_name("assets").glob("*.optimized-*.onnx"))) == 1  # the same content, the same name: one file
    done = sdk_fd("deploy", "--target", "local", outputs["pipeline"], "--frames", "40", "--report-dir", str(tmp_path / "deploy"))
    assert done.returncode in (0, 3, 4), done.stderr  # latency on 40 frames is this machine's business; accuracy is below
    report = json.loads((tmp_path / "deploy" / "report.json").read_text())
    accuracy = [c for c in report["checks"] if c["name"].startswith("accuracy.")]
    assert len(accuracy) == 4 and all(c["status"] == "PASS" for c in accuracy), accuracy  # against the original's FP32 detections
    assert all("trivial" not in c["detail"] and "against the original model assets/ssdlite_pedestrian.onnx" in c["detail"] for c in accuracy)
    assert not report["accuracy"]["compared"]["trivial"] and "what the optimization costs" in report["accuracy"]["compared"]["summary"]
    assert report["accuracy"]["reference_detections"] > 0
    manifest = json.loads(next((tmp_path / "state").rglob("manifest.json")).read_text())
    chosen = next(c for c in first["candidates"] if c["name"] == first["chosen"])
    assert manifest["fingerprint"]["optimize"]["method"] == chosen["method"] and manifest["fingerprint"]["optimize"]["candidate"] == chosen["name"]


def test_the_gate_refuses_a_candidate_that_breaks_it_and_it_is_never_chosen(example):
    from tools.optimize.graph import Graph
    from tools.perf.run import prepared

    pipeline, artifacts = prepared(example, _silent())
    settings = Settings(platform="x", **SMALL)  # six held-out frames hold about 30 people: enough to break a gate
    context = _Context(pipeline, artifacts, "jetson-agx-orin", pipeline.spec.calibration.accuracy, settings, _silent())
    _, holdout = context._frames()
    graph = Graph.load(artifacts.model_path)
    broken = Graph.load(artifacts.model_path)
    head = next(n for n in broken.nodes if n.name.startswith("BoxPredictor_0/ClassPredictor") and n.op_type == "Conv")
    info = broken.conv(head)
    broken.set_weight(info.weight, np.zeros_like(broken.weights[info.weight]))
    candidates = [Candidate("same", "reconstruct", 0.2, graph.to_model(), predicted_ms=1.0),
                  Candidate("broken", "reconstruct", 0.2, broken.to_model(), predicted_ms=0.5)]  # fmt: skip
    context._judge(candidates, holdout)
    assert candidates[0].passed and candidates[0].accuracy["recall"] == 1.0
    assert not candidates[1].passed and candidates[1].accuracy["failures"]
    context._measure(candidates, holdout)
    front = context._front(candidates, original_ms=2.0)
    assert front["chosen"] == "same"  # the faster one broke the gate


def test_a_model_with_nothing_to_prune_is_left_as_it_is_and_says_so(example, tmp_path, monkeypatch):
    from tools.optimize import channels

    monkeypatch.setattr(channels.Channels, "prunable", lambda self: [])
    result = Optimize(example, Settings(platform="jetson-agx-orin", report_dir=tmp_path / "report", **SMALL))()
    assert result.exit_code == EXIT_INCONCLUSIVE
    assert result.report["verdict"] == "INCONCLUSIVE" and result.report["candidates"] == []
    assert "nothing to prune" in result.report["notes"][0] and result.report["blocked"]
    assert not list(example.parent.rglob("*.optimized*"))


def test_target_and_platform_are_one_or_the_other(example):
    from sdk.errors import ConfigError

    with pytest.raises(ConfigError, match="one of --target"):
        Optimize(example, Settings())


def test_the_command_line_prints_one_error_and_one_hint(example, capsys):
    from tools.cli import run

    text = example.read_text().split("calibration:")[0] + "budgets:\n  warmup_frames: 1\n"
    bare = example.with_name("bare.yaml")
    bare.write_text(text)
    code = run(["optimize", str(bare), "--platform", "jetson-agx-orin"])
    err = capsys.readouterr().err
    assert code == 1 and err.count("error:") == 1 and err.count("hint:") == 1 and "calibration" in err


def _silent():
    from tools.progress import SilentProgress

    return SilentProgress()


def test_piped_optimize_says_where_it_is_and_an_interrupted_run_leaves_no_report_folder(tmp_path):
    """Through the real CLI, stderr a pipe: a line for the step under way every SDK_PROGRESS_EVERY_S (with its count and
    an estimate once it has one), and Ctrl-C during the work leaves no folder under reports/ (exit 130)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    shutil.copytree(REPO / "pipelines", tmp_path / "pipelines")
    # The session's host state (its prepared-model cache: a prepared example is found there when this worker made one);
    # the interrupted run's subject is its report folder, under the working folder.
    env = {**os.environ, "PYTHONPATH": str(REPO), "SDK_HISTORY": str(tmp_path / "h.sqlite"), "SDK_PROGRESS_EVERY_S": "0.5"}
    argv = [sys.executable, "-c", "from tools.cli import main; main()", "optimize", "pipelines/pedestrian.yaml", "--platform",
            "jetson-orin-nano-8gb", "--calibration-frames", "8", "--holdout-frames", "6", "--rounds", "2", "--savings", "10%"]  # fmt: skip
    # SIGINT restored in the child: a suite started as a shell's background job ignores it, and a child inherits that.
    child = subprocess.Popen(argv, cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # fmt: skip
    lines, deadline = [], time.monotonic() + 240
    try:
        while time.monotonic() < deadline:
            line = child.stderr.readline()
            if not line:
                break
            lines.append(line.rstrip("\n"))
            if line.startswith("input statistics of") and " so far" in line:  # a step under way, said while it runs
                break
        assert any(" so far" in line for line in lines), lines
        child.send_signal(signal.SIGINT)
        rest = child.communicate(timeout=120)[1]
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    assert child.returncode == 130, rest
    assert "Traceback" not in rest and not (tmp_path / "reports").exists(), list((tmp_path / "reports").rglob("*"))


def test_a_still_image_cannot_be_calibrated_on_and_the_error_says_what_it_needs():
    from sdk.errors import ConfigError
    from sdk.spec.calibration import Calibration
    from tools.int8.calibrate import select_frames

    spec = Calibration(frames=20, holdout_frames=10)
    with pytest.raises(ConfigError) as raised:
        select_frames(1, spec)
    assert "the source is a single still image; calibration needs 30 different frames" in raised.value.message
    assert "loop" not in raised.value.hint and "calibration.source a recording of at least 30 frames" in raised.value.hint
    with pytest.raises(ConfigError) as raised:
        select_frames(12, spec)
    assert "a loop repeats frames, it adds none" in raised.value.message


def test_the_piped_estimate_follows_the_pace_so_far():
    from tools.progress import estimate

    assert estimate(0, 8, 5.0) == "" and estimate(8, 8, 5.0) == "" and estimate(3, None, 5.0) == ""
    assert estimate(1, 8, 6.0) == "about 42 s left" and estimate(2, 10, 40.0) == "about 2 min 40 s left"


def test_the_host_plans_by_the_models_time_without_the_profiler(example_pipeline, prepared_example):
    """On the host the candidates are measured in plain sessions, so their plans are made by the prediction of a plain
    run (decision 1263), not by the profiled figure, whose extra a node would count as savings that never come."""
    from tools.optimize.run import _Context
    from tools.perf.layers import load_layers
    from tools.perf.predict import predict_host
    from tools.perf.targets import host_prediction

    layers = load_layers(prepared_example.model_path)
    planner = _Context.__new__(_Context)  # a run's predictor alone: no frames, no pruning
    planner.platform, planner.pipeline = "host", example_pipeline
    _, peaks = host_prediction(layers, example_pipeline)
    found = predict_host(layers, peaks)
    assert found.plain_ms is not None and found.plain_ms < found.total_ms
    assert planner._predictor(layers)(layers) == pytest.approx(found.plain_ms)
