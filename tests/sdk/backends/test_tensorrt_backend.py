"""The TensorRT backend: IO checked against the pipeline, no TensorRT without a driver; on a GPU, the real thing."""

from __future__ import annotations

import json

import numpy as np
import pytest

from sdk.backends.base import TensorSpec
from sdk.backends.tensorrt_gpu import TensorRTBackend, check_io
from sdk.engine.cuda_check import require_cuda_device
from sdk.errors import BackendError, SdkError

ENGINE = (TensorSpec("images", (1, 3, 300, 300), np.dtype(np.float32)), TensorSpec("boxes", (1, 1917, 1, 4), np.dtype(np.float32)))


def test_matching_io_passes_and_every_difference_is_named():
    assert check_io(ENGINE, ENGINE) == [] and check_io((), ENGINE) == []
    declared = (
        TensorSpec("images", (1, 3, 320, 320), np.dtype(np.float32)),
        TensorSpec("scores", (1, 1917, 2), np.dtype(np.float32)),
    )
    problems = check_io(declared, ENGINE)
    assert problems == [
        "images is images [1, 3, 300, 300] float32, the pipeline expects images [1, 3, 320, 320] float32",
        "scores is missing (engine has boxes, images)",
        "the engine also has boxes",
    ]
    half = (TensorSpec("images", (1, 3, 300, 300), np.dtype(np.float16)), ENGINE[1])
    assert check_io(half, ENGINE) == ["images is images [1, 3, 300, 300] float32, the pipeline expects images [1, 3, 300, 300] float16"]


def test_without_a_driver_open_is_a_clear_error_before_tensorrt(monkeypatch, tmp_path):
    monkeypatch.setattr(require_cuda_device, "__defaults__", ("libcuda-missing.so.1",))
    monkeypatch.setitem(__import__("sys").modules, "tensorrt", None)  # importing it would fail differently
    with pytest.raises(BackendError, match="no CUDA driver on this machine"):
        TensorRTBackend(tmp_path / "model.engine").open()


def _gpu_or_skip():
    pytest.importorskip("tensorrt", reason="needs TensorRT (JetPack or a GPU machine)")
    pytest.importorskip("cuda.bindings.driver", reason="needs cuda-python (cuda-bindings)")
    try:
        require_cuda_device(SdkError)
    except SdkError as exc:
        pytest.skip(f"needs a CUDA device: {exc.message}")


def _detector_engine(prepared_example, tmp_path):
    """An engine of the prepared detector built here (FP16; FP32 on TensorRT 11, strongly typed)."""
    import tensorrt as trt

    from sdk.engine.build_plan import plan_build
    from sdk.engine.platforms import TensorRTVersion
    from sdk.engine.trt_adapter import TensorRTBuilder

    version = TensorRTVersion.parse(trt.__version__)
    plan = plan_build(version, {"Preprocessor/sub:0": (1, 3, 300, 300)}, "fp32" if version.major == 11 else "fp16")
    built = TensorRTBuilder(plan, prepared_example.model_path)()
    engine = tmp_path / "model.engine"
    engine.write_bytes(built.plan)
    return engine, built


@pytest.mark.gpu
@pytest.mark.trt
def test_engine_built_here_runs_like_onnx_runtime(prepared_example, tmp_path):
    """Build an FP16 GPU engine from the prepared detector, run it, compare with ONNX Runtime on the same input."""
    _gpu_or_skip()
    from sdk.backends.onnxruntime_cpu import OnnxRuntimeBackend

    engine, built = _detector_engine(prepared_example, tmp_path)
    layers = json.loads(built.layers)["Layers"]  # the engine inspector's list, DETAILED verbosity
    assert layers and all("Name" in layer and "LayerType" in layer for layer in layers)
    with OnnxRuntimeBackend(prepared_example.model_path) as reference, TensorRTBackend(engine, profile_layers=True) as backend:
        assert check_io(reference.input_specs + reference.output_specs, backend.input_specs + backend.output_specs) == []
        frame = np.random.default_rng(0).uniform(-1, 1, reference.input_specs[0].shape).astype(np.float32)
        for target in (reference, backend):
            target.inputs["Preprocessor/sub:0"][...] = frame
            target.infer()
        assert backend.last_infer_ms and backend.last_infer_ms > 0
        assert backend.slowest_layers(3) and all(ms >= 0 for _, ms in backend.slowest_layers(3))
        for name, expected in reference.outputs.items():
            got = backend.outputs[name].astype(np.float32).ravel()
            cosine = float(got @ expected.ravel() / (np.linalg.norm(got) * np.linalg.norm(expected) + 1e-12))
            assert cosine > 0.999, name


def test_a_cuda_graph_cannot_be_combined_with_the_layer_profiler(tmp_path):
    with pytest.raises(SdkError, match="exclude each other"):
        TensorRTBackend(tmp_path / "model.engine", cuda_graph=True, profile_layers=True)


@pytest.mark.gpu
@pytest.mark.trt
def test_a_captured_cuda_graph_replays_the_same_outputs_frame_after_frame(prepared_example, tmp_path):
    """The graph is captured once at open; new input written into the bound buffers must reach it."""
    _gpu_or_skip()
    engine, _ = _detector_engine(prepared_example, tmp_path)
    rng = np.random.default_rng(1)
    frames = [rng.uniform(-1, 1, (1, 3, 300, 300)).astype(np.float32) for _ in range(3)]
    outputs = {}
    for graph in (False, True):
        with TensorRTBackend(engine, cuda_graph=graph) as backend:
            assert ("CUDA graph" in backend.describe()) is graph
            outputs[graph] = []
            for frame in frames:
                backend.inputs["Preprocessor/sub:0"][...] = frame
                backend.infer()
                outputs[graph].append({k: v.copy() for k, v in backend.outputs.items()})
    for plain, replayed in zip(outputs[False], outputs[True], strict=True):
        for name in plain:
            np.testing.assert_array_equal(plain[name], replayed[name])
    assert not np.array_equal(outputs[True][0]["concat:0"], outputs[True][1]["concat:0"])  # the inputs really changed


# A dynamic-batch engine (several cameras), on the stand-in TensorRT and driver (tests/sdk/backends/trt_standin.py).


def standin_backend(monkeypatch, tmp_path, cameras: int, batch: int, shape=(0, 3, 8, 8)):
    import sys

    import cuda.bindings

    from sdk.backends import tensorrt_gpu
    from sdk.engine.build_plan import plan_build
    from sdk.engine.platforms import TensorRTVersion

    from . import trt_standin

    plan = plan_build(TensorRTVersion.parse(trt_standin.VERSION), {"images": shape}, "fp16", cameras=cameras)
    engine = trt_standin.Engine(plan.profiles[0])
    driver = trt_standin.driver_module()
    monkeypatch.setattr(tensorrt_gpu, "require_cuda_device", lambda error: 1)
    monkeypatch.setitem(sys.modules, "tensorrt", trt_standin.tensorrt_module(engine))
    monkeypatch.setitem(sys.modules, "cuda.bindings.driver", driver)
    monkeypatch.setattr(cuda.bindings, "driver", driver, raising=False)
    path = tmp_path / "model.engine"
    path.write_bytes(trt_standin.plan_bytes())
    declared = (TensorSpec("images", ("N", 3, 8, 8), np.dtype(np.float32)), TensorSpec("scores", ("N", 4), np.dtype(np.float32)))
    return TensorRTBackend(path, declared=declared, batch=batch), engine, driver, plan


def test_a_two_camera_plans_dynamic_batch_engine_opens_with_its_shapes_set_and_runs(monkeypatch, tmp_path):
    """The plan gives two cameras a min-1 / max-2 profile; the engine (-1 batch) opens with [2, 3, 8, 8] set on the
    context before anything is bound, buffers of that size, and runs (the stand-in refuses enqueue without shapes)."""
    backend, engine, driver, plan = standin_backend(monkeypatch, tmp_path, cameras=2, batch=2)
    assert engine.shapes["images"] == (-1, 3, 8, 8) and plan.profiles[0].maximum == (2, 3, 8, 8)
    with backend:
        assert backend.input_shapes == {"images": (2, 3, 8, 8)}
        assert backend.inputs["images"].shape == (2, 3, 8, 8) and backend.outputs["scores"].shape == (2, 4)
        backend.inputs["images"][0], backend.inputs["images"][1] = 1.0, 3.0
        backend.infer()
        np.testing.assert_array_equal(backend.outputs["scores"], [[1, 2, 3, 4], [3, 4, 5, 6]])
        assert backend.last_infer_ms == 0.25
    assert "cudaMalloc" not in driver.calls and {"cuMemAlloc", "cuMemHostAlloc", "cuMemcpyHtoDAsync"} <= set(driver.calls)


def test_a_dynamic_engine_runs_one_camera_at_a_time_within_its_profile_and_refuses_a_batch_beyond_it(monkeypatch, tmp_path):
    backend, *_ = standin_backend(monkeypatch, tmp_path, cameras=2, batch=1)  # batch.size 1: the frames one after another
    with backend:
        assert backend.inputs["images"].shape == (1, 3, 8, 8)
    backend, *_ = standin_backend(monkeypatch, tmp_path, cameras=2, batch=3)
    with pytest.raises(SdkError, match=r"input images takes \[1, 3, 8, 8\] to \[2, 3, 8, 8\] \(profile 0\), the pipeline runs \[3, 3, 8, 8\]"):
        backend.open()
    backend.close()


def test_the_standin_is_strict_an_unset_shape_cannot_enqueue():
    """What the backend's shape setting prevents: enqueueV3 on a dynamic engine whose input shape was never set."""
    from sdk.engine.build_plan import Profile

    from . import trt_standin

    context = trt_standin.Engine(Profile("images", (1, 3, 8, 8), (2, 3, 8, 8), (2, 3, 8, 8))).create_execution_context()
    context.set_tensor_address("images", 1)
    context.set_tensor_address("scores", 2)
    assert context.get_tensor_shape("scores") == (-1, 4) and not context.execute_async_v3(0x5000)
    assert not context.set_input_shape("images", (3, 3, 8, 8)) and not context.set_input_shape("images", (2, 3, 9, 8))


def test_the_standin_driver_names_are_real_driver_names():
    driver = pytest.importorskip("cuda.bindings.driver", reason="cuda-bindings is not installed")
    from . import trt_standin

    standin = trt_standin.driver_module()
    names = [name for name in vars(standin) if name.startswith(("cu", "CU"))]
    assert len(names) > 20 and [name for name in names if not hasattr(driver, name)] == []


def test_nothing_in_sdk_imports_the_cuda_runtime_module():
    """cuda.bindings.runtime refuses a driver older than its CUDA (error 35 on JetPack 6 with cuda-bindings 12.8+):
    the SDK drives CUDA through the driver module only (decision 0412)."""
    import ast
    from pathlib import Path

    import sdk

    found = []
    for path in Path(sdk.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                names = {f"{node.module}.{alias.name}" for alias in node.names} | {node.module}
            elif isinstance(node, ast.Import):
                names = {alias.name for alias in node.names}
            else:
                continue
            if "cuda.bindings.runtime" in names:
                found.append(str(path))
    assert found == []
