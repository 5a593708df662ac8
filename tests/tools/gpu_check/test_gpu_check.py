"""tools/gpu_check/check.py, the one prepared check for a lent GPU machine, tested without one: its one line where there is no
GPU, its steps on the emulated device (the same step code a GPU runs, with the C++ host reference as the kernels), its
result files and their row for docs/hardware.md, and its ONNX Runtime engine against a stand-in CUDA driver."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tools.gpu_check import check as gpu_check

REPO = Path(__file__).resolve().parents[3]


def test_without_a_gpu_it_says_so_in_one_line_and_exits_0(tmp_path):
    """A machine without a CUDA driver (a missing libcuda stands for one where this runs on a GPU machine)."""
    script = (
        "import sys; from sdk.engine import cuda_check; cuda_check.require_cuda_device.__defaults__ = ('libcuda-missing.so.1',);"
        f"from tools.gpu_check.check import main; sys.exit(main(['--out', {str(tmp_path / 'out')!r}]))"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert done.returncode == 0 and done.stderr == ""
    assert done.stdout.count("\n") == 1 and done.stdout.startswith("gpu_check: no NVIDIA GPU here (no CUDA driver on this machine")
    assert not (tmp_path / "out").exists()


@pytest.fixture(scope="module")
def emulated(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu-check")
    code = gpu_check.main(["--emulate", "--frames", "6", "--out", str(out)])
    return code, json.loads((out / "gpu_check.json").read_text()), (out / "gpu_check.md").read_text(), out


def test_every_step_runs_on_the_emulated_device_and_passes(emulated):
    code, result, _, _ = emulated
    steps = result["steps"]
    assert code == 0 and result["verdict"] == "PASS" and result["device"]["emulated"] is True
    assert {name: step["status"] for name, step in steps.items()} == {
        "build": "PASS", "kernels": "PASS", "runtime": "PASS", "runtime_graph": "PASS", "graph_events": "PASS", "timing": "PASS",
        "memcheck": "SKIP", "racecheck": "SKIP",
    }  # fmt: skip
    kernels = steps["kernels"]["cases"]
    assert len(kernels) == 15 and all(case["bit_exact_cpp"] and case["frames"] == 3 for case in kernels)
    assert {case["case"].split("-")[0] for case in kernels} == {"bgr8", "nv12"} and {c["kernel"] for c in kernels} >= {
        "pp_nv12_f16_nchw",
        "pp_bgr8_u8_nchw",
    }
    assert "refused after the replay (cuEventElapsedTime: CUDA_ERROR_CAPTURED_EVENT" in steps["graph_events"]["detail"]
    assert steps["graph_events"]["external"]["timed_replays"] == 20 and steps["graph_events"]["emulation_rule_confirmed"]
    graph = steps["runtime_graph"]["section"]["cuda_graph"]
    assert graph["captured"] and graph["replayed_frames"] == 5
    assert steps["runtime_graph"]["section"]["event_ms"]["decode"]["frames"] == 6 and "100.0% of" in steps["runtime"]["detail"]
    assert sum(step["seconds"] for step in steps.values()) < gpu_check.BUDGET_S


def test_the_markdown_is_a_dated_row_and_an_emulated_result_is_never_recorded(emulated, tmp_path):
    _, result, text, out = emulated
    assert text.startswith(f"# GPU check {result['date']}: PASS (EMULATED, not a GPU)")
    assert gpu_check.HARDWARE_HEADER in text and f"\n| {result['date']}, {result['device'].get('commit')} | emulated device" in text
    hardware = tmp_path / "hardware.md"
    hardware.write_text(f"# What has run where\n\n## GPU checks\n\n{gpu_check.HARDWARE_HEADER}\n{'| --- ' * gpu_check.HARDWARE_COLUMNS}|\n\nAfter.\n")
    assert gpu_check.main(["--record", str(out / "gpu_check.json"), "--hardware", str(hardware)]) == 1
    assert "| 20" not in hardware.read_text()
    gpu = {**result, "device": {**result["device"], "emulated": False, "gpu": "NVIDIA H100 80GB HBM3", "arch": "90", "driver_cuda": "13.0"}}
    gpu["device"].update(nvcc="13.0", cuda_bindings="13.5.0")
    spans_lines = {"status": "FAIL", "detail": "racecheck: ? errors: =====\nworkload: 16 launches\n=====", "seconds": 1}
    gpu["steps"] = {**gpu["steps"], "racecheck": spans_lines}
    (tmp_path / "gpu.json").write_text(json.dumps(gpu))  # a tool's output in a detail spans lines; the row does not
    assert gpu_check.main(["--record", str(tmp_path / "gpu.json"), "--hardware", str(hardware)]) == 0
    lines = hardware.read_text().splitlines()
    row = lines[lines.index(gpu_check.HARDWARE_HEADER) + 2]
    assert row.startswith(f"| {result['date']}, {result['device'].get('commit')} | NVIDIA H100 80GB HBM3 (sm_90), CUDA 13.0 driver")
    assert row.count(" | ") == 4 == gpu_check.HARDWARE_COLUMNS - 1 and row.endswith("FAIL racecheck: ? errors: ===== workload: 16 launches ===== |")
    assert lines[-1] == "After."


def test_the_onnx_runtime_engine_runs_in_stream_order_on_its_device_bindings(monkeypatch, prepared_example):
    """tools/gpu_check/engine.py against the stand-in driver: the input binding copied to page-locked memory, ONNX
    Runtime, the outputs copied into their bindings; inside a capture ONNX Runtime is a host node, launched through the
    driver library's own cuLaunchHostFunc, that runs again on every replay of the graph."""
    import ctypes

    import cuda.bindings

    from sdk.backends.onnxruntime_cpu import OnnxRuntimeBackend
    from tests.sdk.backends import trt_standin
    from tools.gpu_check import engine as gpu_check_engine
    from tools.gpu_check.engine import OnnxRuntimeOnGpu

    class DriverLibrary:  # libcuda.so.1 as a capture sees it: the host node is recorded, not run
        def __init__(self) -> None:
            self.nodes: list[tuple] = []

        def cuLaunchHostFunc(self, stream, function, data):  # noqa: N802 - the driver's name
            self.nodes.append((stream, function, data))
            return 0

    driver, library = trt_standin.driver_module(), DriverLibrary()
    monkeypatch.setitem(sys.modules, "cuda.bindings.driver", driver)
    monkeypatch.setattr(cuda.bindings, "driver", driver, raising=False)
    monkeypatch.setattr(gpu_check_engine, "driver_library", lambda: library)
    frames = np.random.default_rng(0).uniform(-1, 1, (4, 1, 3, 300, 300)).astype(np.float32)
    with OnnxRuntimeBackend(prepared_example.model_path) as reference, OnnxRuntimeOnGpu(prepared_example.model_path) as engine:

        def expected(frame):
            reference.inputs["Preprocessor/sub:0"][...] = frame
            reference.infer()
            return {name: array.copy() for name, array in reference.outputs.items()}

        assert engine.device_bindings and set(engine.inputs) == {"Preprocessor/sub:0"}
        engine.keep_on_device("Preprocessor/sub:0", *engine.outputs)
        ctypes.memmove(engine.device_address("Preprocessor/sub:0"), frames[0].ctypes.data, frames[0].nbytes)  # the kernel's write
        assert engine.enqueue()  # un-captured: ONNX Runtime in stream order, the outputs in their bindings
        for name, want in expected(frames[0]).items():
            got = np.empty_like(want)
            ctypes.memmove(got.ctypes.data, engine.device_address(name), got.nbytes)
            np.testing.assert_array_equal(got, want)
        driver.capturing = True
        assert engine.enqueue() and engine.host_nodes == 1
        [(stream, function, data)] = library.nodes
        assert stream == engine.stream_handle and data is None
        for frame in frames[1:]:  # each replay: the captured copy fills the staging input, the node runs ONNX Runtime
            engine._staging["Preprocessor/sub:0"][...] = frame
            function(data)
            engine.raise_host_error()
            for name, want in expected(frame).items():
                np.testing.assert_array_equal(engine._staging[name], want)


def test_the_engines_driver_names_are_declared_and_real():
    import re

    driver = pytest.importorskip("cuda.bindings.driver", reason="cuda-bindings is not installed")
    from tools.gpu_check import engine as gpu_check_engine

    text = Path(gpu_check_engine.__file__).read_text()
    called = set(re.findall(r'\bcall\("(\w+)"', text)) | set(re.findall(r'\bown\("(\w+)"', text))
    assert {"cuStreamIsCapturing", "cuMemHostAlloc"} <= called <= set(gpu_check_engine.DRIVER_NAMES)
    assert [name for name in gpu_check_engine.DRIVER_NAMES if not hasattr(driver, name)] == []
    assert hasattr(driver.CUstreamCaptureStatus, "CU_STREAM_CAPTURE_STATUS_NONE")


def test_the_results_are_written_after_every_step_so_a_hang_leaves_them(tmp_path, monkeypatch):
    """A step that never returns (here: interrupted, as the call's limit would kill it) leaves the steps before it."""
    from tools.gpu_check import runtime, steps

    class Device:
        def close(self) -> None:
            pass

    def hangs(*_args):
        raise KeyboardInterrupt  # what a kill at the call's limit leaves: the process gone mid-step

    monkeypatch.setattr(steps, "build", lambda *_a: {"status": steps.PASS, "detail": "built"})
    monkeypatch.setattr(runtime, "open_device", lambda *_a: Device())
    monkeypatch.setattr(steps, "frames", lambda n: [])
    monkeypatch.setattr(steps, "kernels", hangs)
    with pytest.raises(KeyboardInterrupt):
        gpu_check.run_steps(tmp_path, 2, True, gpu_check.time.monotonic() + gpu_check.BUDGET_S)
    result = json.loads((tmp_path / "gpu_check.json").read_text())
    assert result["verdict"] == "INCOMPLETE" and result["steps"]["build"]["status"] == "PASS"
    assert result["pending"] == ["kernels", "runtime", "runtime_graph", "graph_events", "timing", "memcheck", "racecheck"]
    assert "INCOMPLETE" in (tmp_path / "gpu_check.md").read_text() and not list(tmp_path.glob(".*.partial"))


def test_a_sanitizer_that_refuses_the_device_is_a_skip_with_its_reason(tmp_path, monkeypatch):
    """compute-sanitizer on a GPU it does not support (as on some lent machines) prints its refusal and exits non-zero."""
    from tools.gpu_check import steps

    folder = tmp_path / "bin"
    folder.mkdir()
    program = folder / "compute-sanitizer"
    program.write_text("#!/bin/sh\necho '========= Error: Device not supported. Please refer to the supported devices.'\nexit 1\n")
    program.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}:/usr/bin:/bin")
    result = steps.sanitizer("memcheck", tmp_path, timeout=30)
    assert result["status"] == steps.SKIP and "does not support this device" in result["detail"]
    assert "Error: Device not supported" in result["detail"]
    program.write_text("#!/bin/sh\necho '========= ERROR SUMMARY: 3 errors'\nexit 9\n")  # a real finding stays a FAIL
    assert steps.sanitizer("memcheck", tmp_path, timeout=30)["status"] == steps.FAIL


@pytest.mark.parametrize(
    ("tool", "summary", "exit_code", "status", "detail"),
    [  # the summary lines as compute-sanitizer of CUDA 13.0 printed them on an H200
        ("memcheck", "========= ERROR SUMMARY: 0 errors", 0, "PASS", "memcheck: 0 errors over 16 launches (exit 0)"),
        ("racecheck", "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)", 0, "PASS", "0 errors, 0 warnings over 16"),
        ("racecheck", "========= RACECHECK SUMMARY: 3 hazards displayed (2 errors, 1 warnings)", 9, "FAIL", "2 errors, 1 warnings over 16"),
        ("racecheck", "========= RACECHECK SUMMARY: 1 hazard displayed (0 errors, 1 warning)", 0, "PASS", "0 errors, 1 warnings over 16"),
        ("racecheck", "", 0, "FAIL", "? errors over 16 launches"),
    ],
)
def test_each_sanitizer_tool_is_judged_by_its_own_summary(tmp_path, monkeypatch, tool, summary, exit_code, status, detail):
    from tools.gpu_check import steps

    folder = tmp_path / "bin"
    folder.mkdir()
    program = folder / "compute-sanitizer"
    program.write_text(f"#!/bin/sh\necho '========= COMPUTE-SANITIZER'\necho 'workload: 16 launches'\necho '{summary}'\nexit {exit_code}\n")
    program.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}:/usr/bin:/bin")
    result = steps.sanitizer(tool, tmp_path, timeout=30)
    assert result["status"] == status and detail in result["detail"]


def test_the_guides_gpu_test_command_names_every_file_with_gpu_tests():
    """The lent machine runs the `gpu` tests by file (its Python lacks packages other modules import): a new file with
    `gpu` tests that the guide's command does not name would never run there."""
    guide = (REPO / "docs" / "guides" / "gpu.md").read_text()
    command = guide.split("python3 -m pytest -m gpu -rs", 1)[1].split("```", 1)[0].replace("\\\n", " ")
    named = set(command.split())
    marked = {
        path.relative_to(REPO).as_posix()
        for path in (REPO / "tests").rglob("test_*.py")
        if re.search(r"^(@pytest\.mark\.gpu|pytestmark = pytest\.mark\.gpu)$", path.read_text(), re.MULTILINE)
    }
    assert marked and named == marked
