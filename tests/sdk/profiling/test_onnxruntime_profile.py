"""The device side of a CPU profile: ONNX Runtime's trace cut into runs and nodes, and `python -m sdk profile`."""

from __future__ import annotations

import json
import subprocess
import sys

from sdk.profiling import OPTIMIZED_FILE, RAW_FILE
from sdk.profiling.trace import parse_trace
from tests.conftest import EXAMPLE, REPO


def _event(name, ts, dur, cat="Node", **args):
    return {"cat": cat, "name": name, "ts": ts, "dur": dur, "ph": "X", "args": args}


def test_the_trace_is_cut_into_runs_and_nodes():
    events = [
        _event("model_run", 0, 100, cat="Session"),
        _event("conv_kernel_time", 10, 40, op_name="Conv", input_type_shape=[{"float": [1, 3, 8, 8]}], output_type_shape=[{"float": [1, 8, 8, 8]}]),
        _event("relu_kernel_time", 60, 10, op_name="Relu"),
        _event("model_run", 200, 80, cat="Session"),
        _event("conv_kernel_time", 205, 30, op_name="Conv"),
        _event("relu_kernel_time", 240, 20, op_name="Relu"),
        _event("conv_fence_before", 10, 1),  # not a kernel
        _event("model_run", 400, 50, cat="Session"),
        _event("conv_kernel_time", 405, 20, op_name="Conv"),
    ]
    runs, nodes = parse_trace(events, warmup=1)
    assert runs == [0.08, 0.05]  # the first run is the warm-up
    assert [n["name"] for n in nodes] == ["conv", "relu"]
    assert nodes[0]["times_ms"] == [0.03, 0.02] and nodes[1]["times_ms"] == [0.02, 0.0]
    runs, nodes = parse_trace(events)
    assert nodes[0]["op"] == "Conv" and nodes[0]["input_shapes"] == [[1, 3, 8, 8]] and nodes[0]["output_shapes"] == [[1, 8, 8, 8]]


def test_python_m_sdk_profile_writes_the_raw_profile(prepared_example, tmp_path):
    out = tmp_path / "out"
    command = [sys.executable, "-m", "sdk", "profile", "--pipeline", str(EXAMPLE), "--artifacts", str(prepared_example.folder), "--out", str(out),
               "--frames", "2", "--warmup", "1"]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert done.returncode == 0, done.stderr
    line = json.loads(done.stdout.strip().splitlines()[-1])
    assert line["backend"] == "onnxruntime" and line["frames"] == 2
    raw = json.loads((out / RAW_FILE).read_text())
    assert raw["threads"] == 2 and raw["spinning"] is False  # the pipeline's model.threads and model.spinning
    assert len(raw["run_ms"]) == len(raw["unprofiled_ms"]) == 2 and all(len(n["times_ms"]) == 2 for n in raw["nodes"])
    assert (out / OPTIMIZED_FILE).is_file() and not list(out.glob(".ort-trace*"))
    bad = subprocess.run([sys.executable, "-m", "sdk", "profile", "--pipeline", str(EXAMPLE), "--out", str(out)], capture_output=True, text=True)
    assert bad.returncode == 2 and "--artifacts" in bad.stderr
