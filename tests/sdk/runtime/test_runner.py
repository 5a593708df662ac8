"""The frame loop end to end on a real (tiny) ONNX model, and the runtime process's report and signals."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from xml.etree import ElementTree

import pytest

import sdk.runtime.runner as runner_module
from sdk.errors import SdkError
from sdk.runtime import PipelineRunner
from sdk.runtime.report import build_report, write_report
from tests.junit_check import validate_junit

REPO = Path(__file__).resolve().parents[3]


def test_every_frame_flows_through_every_stage(tiny_pipeline, tmp_path):
    pipeline, artifacts = tiny_pipeline(frames=12)
    seen = []
    result = PipelineRunner(pipeline, artifacts, tmp_path / "out", on_frame=seen.append).run()
    assert result.frames == 12 and seen == list(range(1, 13))
    lines = [json.loads(line) for line in (tmp_path / "out" / "detections.jsonl").read_text().splitlines()]
    assert [line["frame"] for line in lines] == list(range(12))
    first = lines[0]["detections"]
    # 64 x 48 source, 32 x 32 stretch: x * 2, y * 1.5. person 0.81 at (8, 8, 4, 4), car 0.72 at (24, 20, 6, 8).
    assert [(d["label"], d["score"]) for d in first] == [("person", 0.81), ("car", 0.72)]
    assert first[0]["box"] == [12.0, 9.0, 20.0, 15.0]
    report = build_report(pipeline, result, target="local")
    assert report["frames"] == 12 and report["measured_frames"] == 10 and report["dropped"] == 0
    assert set(report["stages"]) == {"preprocess", "infer", "postprocess", "sink"}
    assert set(report["end_to_end"]) >= {"p50_ms", "p99_ms", "p999_ms", "max_ms"}
    assert report["verdict"] == "PASS" and [c["name"] for c in report["checks"]] == ["end_to_end.p50_ms", "end_to_end.max_ms"]
    write_report(report, tmp_path / "out")
    assert json.loads((tmp_path / "out" / "report.json").read_text()) == report


def fail_on(fails):
    """A hook that raises on the calls `fails(n)` picks."""

    def hook(call: int) -> None:
        if fails(call):
            raise ValueError(f"decoder hiccup on call {call}")

    return hook


def test_corrupt_frames_and_stage_errors_are_counted_and_skipped(tiny_pipeline, tmp_path, postprocess_hook):
    pipeline, artifacts = tiny_pipeline(uri="synthetic://boxes?width=64&height=48&frames=20&corrupt_every=5")
    postprocess_hook(fail_on(lambda n: n % 4 == 0))
    result = PipelineRunner(pipeline, artifacts, tmp_path / "out").run()
    assert result.counters.corrupt == 4  # frames 4, 9, 14, 19
    assert result.stage_errors == {"postprocess": 4}  # 16 decoded frames, every 4th fails
    assert result.frames == 12 and "decoder hiccup" in result.last_error
    assert len((tmp_path / "out" / "detections.jsonl").read_text().splitlines()) == 12


def test_lost_frames_are_in_the_report_apart_from_corrupt_ones(tiny_pipeline, tmp_path, video_path):
    from tests.sdk.sources.recordings import cut_clip

    (tmp_path / "pipeline").mkdir()
    cut_clip(tmp_path / "pipeline", video_path)  # 60 frames, 20 to 29 cut out with FFmpeg
    pipeline, artifacts = tiny_pipeline(uri="file://cut.avi")
    result = PipelineRunner(pipeline, artifacts, tmp_path / "out").run()
    report = build_report(pipeline, result, target="local")
    assert (report["frames"], report["corrupt_frames"], report["lost_frames"]) == (50, 0, 10)
    assert report["cameras"]["tiny"]["lost_frames"] == 10
    (note,) = [n for n in report["notes"] if "lost_frames" in n]
    assert note.startswith("file://cut.avi: 10 frame(s) the recording promised never arrived (lost_frames;")
    assert note.endswith("the newest: 10 frame(s) missing between 1.900 s and 3.000 s (a hole in the timestamps)")
    assert report["outputs"] == [{"output": "detections.jsonl", "written": 50, "not_written": 0, "last_error": None}]


def test_a_stage_failing_every_frame_stops_the_run(tiny_pipeline, tmp_path, postprocess_hook):
    pipeline, artifacts = tiny_pipeline(frames=100)
    postprocess_hook(fail_on(lambda n: True))
    with pytest.raises(SdkError, match="failed on 25 frames in a row"):
        PipelineRunner(pipeline, artifacts, tmp_path / "out").run()
    # Sinks still close cleanly: the output holds exactly the frames that succeeded (none).
    assert (tmp_path / "out" / "detections.jsonl").read_text() == ""


def run_process(pipeline, artifacts, out: Path, *extra: str) -> subprocess.Popen:
    command = [
        sys.executable,
        "-m",
        "sdk",
        "run",
        "--pipeline",
        str(pipeline.path),
        "--artifacts",
        str(artifacts.folder),
        "--report-dir",
        str(out),
        "--events",
        *extra,
    ]
    return subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize(
    ("frames", "max_ms", "verdict", "code"),
    [
        (8, 5000, "PASS", 0),  # 6 measured frames: enough for p50 (5) and max (1)
        (8, 1e-6, "FAIL", 3),  # every frame over a 1 ns maximum
        (4, 5000, "INCONCLUSIVE", 4),  # 2 measured frames: p50 needs 5
    ],
)
def test_runtime_process_exit_code_is_the_verdict(tiny_pipeline, tmp_path, frames, max_ms, verdict, code):
    pipeline, artifacts = tiny_pipeline(frames=frames, max_ms=max_ms)
    child = run_process(pipeline, artifacts, tmp_path / "out")
    stdout, stderr = child.communicate(timeout=60)
    assert child.returncode == code, stderr
    events = [json.loads(line) for line in stdout.splitlines()]
    assert events[0]["event"] == "started" and events[-1]["event"] == "finished" and events[-1]["frames"] == frames
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["verdict"] == verdict and report["verdict_detail"] == verdict
    # Traceability: when, where, by whom, with what (the device's side; the host adds its own).
    run = report["run"]
    assert run["started_at"] <= run["finished_at"] and run["started_at"].endswith("+00:00")
    assert run["host"] and run["sdk_version"] and run["command"].startswith("python -m sdk run --pipeline")
    assert run["pipeline_sha256"] == report["hashes"]["pipeline_sha256"] and run["inference_runtime"] == "onnxruntime"
    assert run["onnxruntime"] and run["tensorrt"] is None and run["cuda"] is None
    assert report["environment"]["during"]["cpus"] == os.cpu_count()
    # junit.xml: one case per budget, FAIL and INCONCLUSIVE (too few frames) both failures, never skipped.
    validate_junit(tmp_path / "out" / "junit.xml")
    suite = ElementTree.parse(tmp_path / "out" / "junit.xml").getroot().find("testsuite")
    cases = {case.get("name"): case for case in suite.iter("testcase")}
    assert sorted(cases) == ["end_to_end.max_ms", "end_to_end.p50_ms"] and suite.get("tests") == "2"
    failures = {"PASS": 0, "FAIL": 1, "INCONCLUSIVE": 1}[verdict]
    assert (len(list(suite.iter("failure"))), len(list(suite.iter("skipped")))) == (failures, 0)
    assert (suite.get("failures"), suite.get("skipped")) == (str(failures), "0")
    assert suite.get("timestamp") == run["started_at"] and suite.get("hostname") == run["host"]
    if verdict == "FAIL":
        failure = cases["end_to_end.max_ms"].find("failure")
        assert failure.get("type") == "Fail" and failure.get("message").startswith("end_to_end.max_ms: FAIL: measured")
    if verdict == "INCONCLUSIVE":
        failure = cases["end_to_end.p50_ms"].find("failure")
        assert failure.get("type") == "Inconclusive" and "5 frames needed" in failure.get("message")


def test_runtime_process_error_is_one_line_and_exit_1(tiny_pipeline, tmp_path):
    pipeline, artifacts = tiny_pipeline(frames=4)
    artifacts.model_path.write_bytes(b"not a model")
    child = run_process(pipeline, artifacts, tmp_path / "out")
    _, stderr = child.communicate(timeout=60)
    assert child.returncode == 1
    assert stderr.startswith("error: ONNX Runtime cannot load") and "\nhint: " in stderr and "Traceback" not in stderr


def test_sigterm_mid_run_still_writes_report_and_whole_files(tiny_pipeline, tmp_path):
    pipeline, artifacts = tiny_pipeline(frames=10_000, rate="50")
    out = tmp_path / "out"
    child = run_process(pipeline, artifacts, out)
    for line in child.stdout:  # wait until frames flow
        if json.loads(line).get("event") == "progress":
            break
    child.send_signal(signal.SIGTERM)
    child.wait(timeout=30)
    report = json.loads((out / "report.json").read_text())
    assert 0 < report["frames"] < 10_000
    lines = (out / "detections.jsonl").read_text().splitlines()
    assert len(lines) == report["frames"] and all(json.loads(line)["frame"] >= 0 for line in lines)
    assert sorted(p.name for p in out.iterdir()) == ["detections.jsonl", "junit.xml", "report.json", "timeline.npz"]


def test_sigkill_mid_run_leaves_no_half_written_file_reachable(tiny_pipeline, tmp_path):
    pipeline, artifacts = tiny_pipeline(frames=10_000, rate="50")
    out = tmp_path / "out"
    child = run_process(pipeline, artifacts, out)
    for line in child.stdout:
        if json.loads(line).get("event") == "progress":
            break
    time.sleep(0.2)
    os.kill(child.pid, signal.SIGKILL)
    child.wait(timeout=30)
    visible = [p.name for p in out.iterdir() if not p.name.startswith(".")]
    assert visible == []  # only hidden `.name.partial` files: nothing a reader would take for a result


def test_a_profiling_backends_slowest_layers_reach_the_report(tiny_pipeline, tmp_path, monkeypatch):
    """TensorRT's per-layer profiler (a GPU-only path) stood in for by the real ORT backend plus layer totals."""
    pipeline, artifacts = tiny_pipeline(frames=10)
    original = runner_module.create_backend

    def profiled(*args, **kwargs):
        backend = original(*args, **kwargs)
        backend.slowest_layers = lambda count: [("conv_stem", 20.0), ("conv_head", 5.0)][:count]  # ms summed over the run
        return backend

    monkeypatch.setattr(runner_module, "create_backend", profiled)
    result = PipelineRunner(pipeline, artifacts, tmp_path / "out").run()
    report = build_report(pipeline, result, target="local")
    assert report["slowest_layers"] == [{"layer": "conv_stem", "ms_per_frame": 2.0}, {"layer": "conv_head", "ms_per_frame": 0.5}]


@pytest.mark.parametrize(("key", "host_work", "expected"), [(None, False, None), ("true", False, None), ("false", False, "0"), ("true", True, "0")])
def test_the_model_session_spins_as_model_spinning_says_unless_the_run_is_host_work(tiny_pipeline, tmp_path, monkeypatch, key, host_work, expected):
    """`model.spinning: false` reaches the real ONNX Runtime session the runner opens (its own options say so); a
    runner for host work (spinning=False: the FP32 reference) never spins, whatever the file says. Unset and true:
    ONNX Runtime's default (no entry)."""
    from sdk.backends.onnxruntime_cpu import OnnxRuntimeBackend
    from sdk.spec import load_pipeline

    pipeline, artifacts = tiny_pipeline(frames=2)
    if key is not None:
        text = pipeline.path.read_text()
        assert "\nmodel:\n" in text
        pipeline.path.write_text(text.replace("\nmodel:\n", f"\nmodel:\n  spinning: {key}\n", 1))
        pipeline = load_pipeline(pipeline.path)
        assert pipeline.spec.model.spinning == (key == "true")
    seen = []
    real_open = OnnxRuntimeBackend.open

    def open_and_look(self):
        real_open(self)
        try:
            seen.append(self._session.get_session_options().get_session_config_entry("session.intra_op.allow_spinning"))
        except Exception:  # ONNX Runtime raises for an entry that was never set
            seen.append(None)

    monkeypatch.setattr(OnnxRuntimeBackend, "open", open_and_look)
    PipelineRunner(pipeline, artifacts, tmp_path / "out", **({"spinning": False} if host_work else {})).run()
    assert seen == [expected]


def test_one_camera_is_a_set_of_one(tiny_pipeline, tmp_path):
    """The loop has no one-camera branch: a single camera's own section holds exactly the run's frames and figures
    (the same recorder contents as the whole run's), its counters are the run's, and the report has the keys it had."""
    pipeline, artifacts = tiny_pipeline(frames=12)
    runner = PipelineRunner(pipeline, artifacts, tmp_path / "out")
    result = runner.run()
    report = build_report(pipeline, result, target="local")
    ((name, camera),) = report["cameras"].items()
    assert camera["frames"] == report["frames"] == 12 and camera["measured_frames"] == report["measured_frames"]
    assert camera["stages"] == report["stages"] and camera["end_to_end"] == {k: report["end_to_end"][k] for k in camera["end_to_end"]}
    assert camera["queue"] == report["queue"] and camera["dropped"] == report["dropped"]
    own, whole = result.cameras[name].recorder.rows(), result.recorder.rows()
    assert all((a == b).all() for a, b in zip(own, whole, strict=True))
    assert (tmp_path / "out" / "detections.jsonl").is_file() and not list((tmp_path / "out").glob("*-*.jsonl"))
    assert runner.stream is not None and runner.stream.source_ended and runner.counters.delivered == 12
