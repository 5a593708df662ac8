"""The emulated device's wiring checks: allocation bounds, launch geometry, candidate capacity overflow, events."""

from __future__ import annotations

import time

import numpy as np
import pytest

from sdk.errors import BackendError
from sdk.geometry import ResizeGeometry
from sdk.gpu.decode import YoloDecodePlan
from sdk.gpu.emulation import EmulatedCuda
from sdk.gpu.session import STAGES, CudaSession, DeviceChoice
from sdk.postprocess.device import DeviceDecoder
from sdk.spec.schema import Postprocess, Resize


class HostBackend:
    """The bindings of an engine as the ONNX Runtime backend holds them (bound numpy arrays)."""

    name = "onnxruntime"

    def __init__(self, output: np.ndarray) -> None:
        self.inputs = {"images": np.zeros((1, 3, 64, 64), np.float32)}
        self.outputs = {"output0": output}

    def infer(self) -> None:  # the outputs are already what the engine would leave
        pass


def yolo_rows(count: int) -> np.ndarray:
    """v5 rows: every one a confident class-1 box at its own place (no two overlap)."""
    rows = np.zeros((count, 7), np.float32)
    rows[:, 0] = 20 * np.arange(count) + 10
    rows[:, 1], rows[:, 2], rows[:, 3] = 10, 8, 8
    rows[:, 4], rows[:, 6] = 1.0, 0.9
    return rows[None]


def spec(max_detections: int = 100) -> Postprocess:
    return Postprocess(
        decoder={"kind": "yolo", "output": "output0", "layout": "v5"}, classes=("a", "b"), score_threshold=0.5, max_detections=max_detections
    )


def geometry() -> ResizeGeometry:
    return ResizeGeometry.plan(2000, 64, Resize(width=2000, height=64))


def decoder(capacity: int, count: int = 40) -> tuple[DeviceDecoder, CudaSession]:
    backend = HostBackend(yolo_rows(count))
    session = CudaSession(DeviceChoice("cuda", "test", emulated=True), backend, None)
    plan = YoloDecodePlan.build(spec(), backend.outputs["output0"].shape, capacity)
    return DeviceDecoder(spec(), plan, session, {"rows": "output0"}), session


def engine_ran(session: CudaSession) -> None:
    """What the infer stage leaves on the stream: the engine between its two events, recorded as this frame's."""
    assert session.engine_enqueue()


def test_capacity_overflow_is_counted_not_silent():
    stage, session = decoder(capacity=16)
    for _ in range(3):
        engine_ran(session)
        detections = stage(geometry())
    assert len(detections) == 16  # what fitted, through the host NMS
    report = session.report()["decode"]
    assert report == {"device": "cuda", "kernel": "yolo_decode", "capacity": 16, "most_candidates": 40, "overflow_frames": 3, "candidates_lost": 72}
    assert {stage: session.times.frames[stage] for stage in STAGES} == {"preprocess": 0, "infer": 3, "decode": 3}


def test_within_capacity_only_the_candidates_come_back():
    stage, session = decoder(capacity=64)
    engine_ran(session)
    detections = stage(geometry())
    assert len(detections) == 40 and session.report()["decode"]["overflow_frames"] == 0
    # The count, then 40 boxes, scores and classes: not the capacity's 64, not the raw output.
    assert session.gpu.bytes_copied["to_host"] == 4 + 40 * (16 + 4 + 4)
    assert sorted(np.round(detections.boxes[:40, 0]).astype(int)) == [20 * k + 6 for k in range(40)]


def test_copies_and_launches_are_checked_against_their_allocations():
    gpu = EmulatedCuda().open()
    device = gpu.device_buffer(64)
    with pytest.raises(BackendError, match="run past the end of device buffer"):
        gpu.upload(device, np.zeros(65, np.uint8))
    with pytest.raises(BackendError, match="in no device allocation"):
        gpu.download(np.zeros(4, np.uint8), device + 4096)
    backend = HostBackend(yolo_rows(8))
    session = CudaSession(DeviceChoice("cuda", "test", emulated=True), backend, None)
    plan = YoloDecodePlan.build(spec(), (1, 80, 7), 8)  # a plan for more rows than the binding holds
    with pytest.raises(BackendError, match="yolo_decode: output rows"):
        stage = DeviceDecoder(spec(), plan, session, {"rows": "output0"})
        stage(geometry())
    with pytest.raises(BackendError, match="no function"):
        gpu.function("pp_bgr8_f64_nchw")


def test_uninitialised_device_memory_is_not_zero():
    """A kernel that reads what nothing wrote sees 0xCD bytes, not a convenient zero."""
    gpu = EmulatedCuda().open()
    host = np.zeros(8, np.uint8)
    gpu.download(host, gpu.device_buffer(8))
    gpu.synchronize()
    assert (host == 0xCD).all()


class InputBackend:
    name = "onnxruntime"

    def __init__(self, dtype) -> None:
        self.inputs = {"images": np.zeros((1, 3, 32, 32), dtype)}
        self.outputs: dict = {}


def test_int8_engines_take_the_fp32_input_and_only_an_int8_binding_gets_the_quantising_kernel():
    from sdk.errors import ConfigError
    from sdk.preprocess.cuda import CudaPreprocessor
    from sdk.spec.schema import Preprocess

    spec = Preprocess(resize={"width": 32, "height": 32}, normalize={"scale": 1 / 127.5, "mean": [1, 1, 1]})
    image = np.random.default_rng(1).integers(0, 256, (48, 64, 3), dtype=np.uint8)
    choice = DeviceChoice("cuda", "test", emulated=True)
    fp32 = InputBackend(np.float32)  # an INT8 engine with a float32 input, as TensorRT builds them from Q/DQ models
    with CudaPreprocessor(spec, fp32, choice) as stage:
        stage(image)
        assert stage.plan.kernel == "pp_bgr8_f32_nchw"
    with pytest.raises(ConfigError, match="is INT8"):
        CudaPreprocessor(spec, InputBackend(np.int8), choice)
    quantised = InputBackend(np.int8)
    with CudaPreprocessor(spec, quantised, choice, int8_scale=1 / 127) as stage:
        stage(image)
        assert stage.plan.kernel == "pp_bgr8_i8_nchw"
    expected = np.clip(np.rint(fp32.inputs["images"] / np.float32(1 / 127)), -128, 127)
    assert np.abs(quantised.inputs["images"].astype(int) - expected).max() <= 1 and (quantised.inputs["images"] == expected).mean() > 0.99


class SlowHostBackend(HostBackend):
    """An engine that takes 2 ms on the stream."""

    def infer(self) -> None:
        time.sleep(0.002)


def test_the_infer_time_is_the_engines_events_not_the_hosts_round_trips():
    """The engine's time is read between the events recorded right before and after its enqueue: the host's work
    between the preprocessing and the engine (here 600 ms of it) is not counted as inference."""
    backend = SlowHostBackend(yolo_rows(8))
    session = CudaSession(DeviceChoice("cuda", "test", emulated=True), backend, None)
    plan = YoloDecodePlan.build(spec(), backend.outputs["output0"].shape, 16)
    stage = DeviceDecoder(spec(), plan, session, {"rows": "output0"})
    for _ in range(2):
        session.times.mark("preprocess_start")
        session.times.mark("preprocess_end")
        session.times.add("preprocess")
        time.sleep(0.6)  # the host between the stages (a round trip, other threads)
        session.infer_step()
        stage(geometry())
    event_ms = session.report()["event_ms"]
    # The engine's 2 ms, and what a busy machine adds to a 2 ms sleep (tens of ms at load 8), far below the host's 600.
    assert event_ms["infer"]["frames"] == 2 and 2 <= event_ms["infer"]["max_ms"] < 200, event_ms
    assert session.report()["infer_enqueue_ms"]["frames"] == 2  # the host's own time to enqueue the engine, kept apart
