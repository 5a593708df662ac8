"""preprocess.cuda_graph on the emulated device: the frame's CUDA path captured once and replayed (sdk/gpu/graph.py).

The emulated stream records what a capture enqueues and a launch replays it, so the runtime's capture code (which
operations go into the graph, in which order, with which buffers) runs on every machine. The real capture and
replay is tests/plugins_cuda/test_gpu.py's gpu-marked test; nothing here ran on a GPU.
"""

from __future__ import annotations

import numpy as np
import pytest

from sdk.errors import BackendError, ConfigError
from sdk.gpu.emulation import UNINITIALISED, EmulatedCuda
from sdk.gpu.graph import FrameGraph
from sdk.gpu.session import CudaSession
from sdk.spec import load_pipeline

from ..preprocess.test_cuda_path import pedestrian

# Frames a run: the first 12 of the walkway hold 34 people (detections to compare, frame by frame). A run that only has
# to show whether the frames were captured (the mutations, the refusals) needs the warm-up frame and a few replays.
FRAMES = 12
SHORT = 4


def run(pipeline_path, artifacts, out, monkeypatch, frames: int = FRAMES):
    """The pipeline on the emulated CUDA path for `frames` frames: (result, detections.jsonl's lines)."""
    import json

    from sdk.runtime import PipelineRunner

    monkeypatch.setenv("SDK_CUDA_EMULATION", "host")
    result = PipelineRunner(load_pipeline(pipeline_path, check_files=False), artifacts, out, max_frames=frames).run()
    return result, [json.loads(line) for line in (out / "detections.jsonl").read_text().splitlines()]


def with_graph(path, extra: str = ""):
    text = path.read_text().replace("  device: cuda\n", f"  device: cuda\n  cuda_graph: true\n{extra}", 1)
    graphed = path.with_name(path.stem + "_graph.yaml")
    graphed.write_text(text)
    return graphed


def test_the_emulated_stream_records_a_capture_and_replays_it():
    with EmulatedCuda("copy") as gpu:
        host, _ = gpu.pinned_buffer(16, mapped=False)
        host[:] = np.arange(16, dtype=np.uint8)
        device = gpu.device_buffer(16)
        back, _ = gpu.pinned_buffer(16, mapped=False, what="pinned result")
        back[:] = 0
        graph = FrameGraph(gpu)

        def frame() -> bool:
            gpu.upload(device, host)
            gpu.download(back, device)
            return True

        assert graph.capture(frame)
        gpu.synchronize()
        assert not back.any()  # capturing ran nothing
        host[:] = 7  # a new frame in the same buffer
        graph.launch()
        assert not back.any()  # launched, not yet waited for: the stream is asynchronous
        gpu.synchronize()
        assert (back == 7).all()
        assert graph.report() == {"requested": True, "captured": True, "replayed_frames": 1}
        assert gpu.bytes_copied == {"to_device": 16, "to_host": 16}


def test_waiting_inside_a_capture_is_refused_and_invalidates_it_as_on_a_gpu():
    with EmulatedCuda() as gpu:
        graph = FrameGraph(gpu)

        def frame() -> bool:
            gpu.synchronize()
            return True

        assert not graph.capture(frame)
        assert graph.reason.startswith("the frame cannot be captured: cuStreamSynchronize: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED")
        gpu.synchronize()  # the stream is usable again, and nothing is recorded any more
        device, back = gpu.device_buffer(4), np.zeros(4, np.uint8)
        gpu.download(back, device)
        gpu.synchronize()
        assert (back == UNINITIALISED).all()
        with pytest.raises(BackendError, match="CUDA_ERROR_STREAM_CAPTURE_UNMATCHED"):
            gpu.end_capture()
        # A refused call the frame catches itself still leaves no graph: CUDA invalidates the capture.
        gpu.begin_capture()
        with pytest.raises(BackendError):
            gpu.synchronize()
        with pytest.raises(BackendError, match="CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"):
            gpu.end_capture()


def test_a_plain_event_recorded_in_a_capture_cannot_be_timed_after_the_replay():
    """The defect CUDA would have refused: cuEventRecord inside a capture makes no node, so after cuGraphLaunch the
    events are still 'captured' and cuEventElapsedTime on them is CUDA_ERROR_CAPTURED_EVENT."""
    with EmulatedCuda() as gpu:
        start, stop = gpu.event(), gpu.event()
        device = gpu.device_buffer(4)
        graph = FrameGraph(gpu)

        def plain() -> bool:
            gpu.record(start)
            gpu.memset32(device, 1, 1)
            gpu.record(stop)
            return True

        assert graph.capture(plain)
        graph.launch()
        gpu.synchronize()
        with pytest.raises(BackendError, match="CUDA_ERROR_CAPTURED_EVENT"):
            gpu.event_ms(start, stop)

        start, stop = gpu.event(), gpu.event()

        def external() -> bool:  # what sdk/gpu/session.py records inside a capture
            gpu.record(start, external=True)
            gpu.memset32(device, 1, 1)
            gpu.record(stop, external=True)
            return True

        graph = FrameGraph(gpu)
        assert graph.capture(external)
        with pytest.raises(BackendError, match="CUDA_ERROR_INVALID_HANDLE"):  # not yet launched: never recorded
            gpu.event_ms(start, stop)
        graph.launch()
        assert gpu.event_ms(start, stop) >= 0
        with pytest.raises(BackendError, match="CUDA_ERROR_INVALID_VALUE"):  # the flag is for captures only
            gpu.record(start, external=True)


def test_inside_a_capture_no_allocation_and_no_copy_with_pageable_memory():
    with EmulatedCuda("copy") as gpu:
        device = gpu.device_buffer(8)
        pinned, _ = gpu.pinned_buffer(8, mapped=False)
        pageable = np.zeros(8, np.uint8)
        gpu.upload(device, pageable)  # outside a capture: allowed (the driver stages it)
        for refused, call in (
            (lambda: gpu.download(pageable, device), "cuMemcpyDtoHAsync"),
            (lambda: gpu.upload(device, pageable), "cuMemcpyHtoDAsync"),
            (lambda: gpu.device_buffer(8), "cuMemAlloc"),
            (lambda: gpu.pinned_buffer(8, mapped=True), "cuMemHostAlloc"),
        ):
            gpu.begin_capture()
            with pytest.raises(BackendError, match=f"{call}: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"):
                refused()
            with pytest.raises(BackendError, match="INVALIDATED"):
                gpu.end_capture()
        gpu.begin_capture()
        gpu.download(pinned, device)  # page-locked memory: a graph node
        assert gpu.end_capture().names == ["download"]


def test_a_kernel_may_not_read_pinned_memory_that_is_not_mapped_for_the_gpu():
    with EmulatedCuda("copy") as gpu:
        _, address = gpu.pinned_buffer(16, mapped=False)
        assert address == 0  # no device address: a discrete GPU copies the frame first
        array, _ = gpu.pinned_buffer(16, mapped=False)
        with pytest.raises(BackendError, match="not mapped for the GPU"):
            gpu.check(array.ctypes.data, 16, "a kernel's source")


def test_the_engine_is_captured_only_after_a_warm_up_enqueue():
    with EmulatedCuda() as gpu:
        ran = []
        gpu.begin_capture()
        with pytest.raises(BackendError, match="before an un-captured enqueue"):
            gpu.engine(lambda: ran.append(1))
        with pytest.raises(BackendError, match="INVALIDATED"):
            gpu.end_capture()
        gpu.engine(lambda: ran.append(1))  # the warm-up
        gpu.begin_capture()
        gpu.engine(lambda: ran.append(2))
        graph = gpu.end_capture()
        gpu.launch_graph(graph)
        gpu.synchronize()
        assert ran == [1, 2]


@pytest.mark.parametrize("memory", ["mapped", "copy"])
def test_the_replayed_frames_give_the_uncaptured_paths_detections(tmp_path, monkeypatch, prepared_example, video_path, memory):
    """The example (SSD) on the emulated CUDA path (Jetson's mapped memory, a discrete GPU's copy), with and without the
    graph: the same detections frame by frame, every frame after the warm-up replayed, and every stage of every frame
    timed from the events the graph records (external event nodes), the replayed frame also as a whole."""
    monkeypatch.setenv("SDK_CUDA_EMULATION_MEMORY", memory)
    plain_path = pedestrian(tmp_path, "cuda", video_path)
    plain_result, plain = run(plain_path, prepared_example, tmp_path / "plain", monkeypatch)
    graph_result, graphed = run(with_graph(plain_path), prepared_example, tmp_path / "graph", monkeypatch)
    section = graph_result.preprocess
    assert section["memory"] == memory
    graph = section["cuda_graph"]
    assert {k: graph[k] for k in ("requested", "captured", "replayed_frames")} == {"requested": True, "captured": True, "replayed_frames": FRAMES - 1}
    assert "timing" not in graph and graph["frame_ms"]["frames"] == FRAMES - 1 and graph["frame_ms"]["mean_ms"] > 0
    assert "cuda_graph" not in plain_result.preprocess
    assert {stage: times["frames"] for stage, times in section["event_ms"].items()} == {"preprocess": FRAMES, "infer": FRAMES, "decode": FRAMES}
    assert all(times["max_ms"] >= times["mean_ms"] > 0 for times in section["event_ms"].values())
    assert section["decode"]["device"] == "cuda" and section["decode"]["overflow_frames"] == 0
    assert len(plain) == len(graphed) == FRAMES and sum(len(line["detections"]) for line in plain) > 30
    assert [line["detections"] for line in graphed] == [line["detections"] for line in plain]


def test_an_engine_that_refuses_capture_runs_uncaptured_and_the_report_says_why(tmp_path, monkeypatch, prepared_example, video_path):
    """TensorRT's enqueueV3 returns false under capture for engines it cannot capture: the frames run un-captured."""
    enqueue = CudaSession.engine_enqueue
    monkeypatch.setattr(CudaSession, "engine_enqueue", lambda self: False if self.gpu.capturing else enqueue(self))
    plain_path = pedestrian(tmp_path, "cuda", video_path)
    _, plain = run(plain_path, prepared_example, tmp_path / "plain", monkeypatch, SHORT)
    result, graphed = run(with_graph(plain_path), prepared_example, tmp_path / "graph", monkeypatch, SHORT)
    assert result.preprocess["cuda_graph"] == {
        "requested": True,
        "captured": False,
        "replayed_frames": 0,
        "reason": "TensorRT's enqueueV3 refused to run under stream capture (data-dependent shapes, loops, or a plugin)",
    }
    assert [line["detections"] for line in graphed] == [line["detections"] for line in plain]


def test_mutation_without_the_pinned_candidate_buffers_the_frame_is_not_captured(tmp_path, monkeypatch, prepared_example, video_path):
    """The candidates are copied into page-locked memory inside the graph; into ordinary (pageable) arrays the copy is
    refused during capture, as CUDA refuses it, so the run falls back to un-captured frames and says why (the test
    above, which asserts the capture, fails with this mutation)."""
    from sdk.postprocess import device

    monkeypatch.setattr(device, "_pinned_like", lambda gpu, array: np.zeros_like(array))
    result, graphed = run(with_graph(pedestrian(tmp_path, "cuda", video_path)), prepared_example, tmp_path / "graph", monkeypatch, SHORT)
    graph = result.preprocess["cuda_graph"]
    assert (graph["captured"], graph["replayed_frames"]) == (False, 0)
    assert "cuMemcpyDtoHAsync: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED" in graph["reason"] and "pageable" in graph["reason"]
    assert len(graphed) == SHORT


def test_mutation_without_the_pinned_frame_buffer_a_discrete_gpu_frame_is_not_captured(tmp_path, monkeypatch, prepared_example, video_path):
    """On a discrete GPU the frame is uploaded inside the graph: from a pageable buffer that is refused too."""
    pinned = EmulatedCuda.pinned_buffer

    def pageable_frames(self, nbytes, mapped, what="pinned frame buffer"):
        if what != "pinned frame buffer":
            return pinned(self, nbytes, mapped, what)
        return np.zeros(nbytes, np.uint8), 0

    monkeypatch.setenv("SDK_CUDA_EMULATION_MEMORY", "copy")
    monkeypatch.setattr(EmulatedCuda, "pinned_buffer", pageable_frames)
    result, _ = run(with_graph(pedestrian(tmp_path, "cuda", video_path)), prepared_example, tmp_path / "graph", monkeypatch, SHORT)
    assert result.preprocess["cuda_graph"]["captured"] is False
    assert "cuMemcpyHtoDAsync: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED" in result.preprocess["cuda_graph"]["reason"]


def test_mutation_plain_event_records_in_the_capture_leave_the_replayed_frames_untimed(tmp_path, monkeypatch, prepared_example, video_path):
    """The confirmed defect put back (plain cuEventRecord inside the capture): after the first replay the stage events
    are CUDA_ERROR_CAPTURED_EVENT. The run does not end (the frames are timed as a whole and the report says why), but
    only the warm-up frame has stage times, so the test that asserts every frame's stages fails with this mutation."""
    from sdk.gpu import session

    monkeypatch.setattr(session.StreamTimes, "mark", lambda self, name: self.gpu.record(self.events[name]))
    result, graphed = run(with_graph(pedestrian(tmp_path, "cuda", video_path)), prepared_example, tmp_path / "graph", monkeypatch, SHORT)
    graph = result.preprocess["cuda_graph"]
    assert graph["captured"] and graph["replayed_frames"] == SHORT - 1 and len(graphed) == SHORT
    assert "CUDA_ERROR_CAPTURED_EVENT" in graph["timing"] and graph["frame_ms"]["frames"] == SHORT - 1
    assert result.preprocess["event_ms"]["preprocess"]["frames"] == 1


def test_the_graph_is_validated_at_load(tmp_path, video_path):
    cpu = pedestrian(tmp_path, "cpu", video_path)
    bad = cpu.with_name("cpu_graph.yaml")
    bad.write_text(cpu.read_text().replace("  device: cpu\n", "  device: cpu\n  cuda_graph: true\n", 1))
    with pytest.raises(ConfigError) as caught:
        load_pipeline(bad, check_files=False)
    assert "preprocess.cuda_graph" in str(caught.value) and "allowed: true only with device cuda or auto" in str(caught.value)
    both = with_graph(pedestrian(tmp_path, "cuda", video_path))
    both.write_text(both.read_text().replace("model:\n", "model:\n  cuda_graph: true\n", 1))
    with pytest.raises(ConfigError) as caught:
        load_pipeline(both, check_files=False)
    assert "together with model.cuda_graph (the engine alone)" in str(caught.value)


def test_a_graph_that_does_not_instantiate_runs_uncaptured_and_the_report_says_why(tmp_path, monkeypatch, prepared_example, video_path):
    """cuGraphInstantiate can fail (a node kind the device cannot run in a graph): the graph is an optimisation, so the
    frames run un-captured and the run goes on."""

    def refuse(self, graph):
        raise BackendError("cuGraphInstantiate failed: CUDA_ERROR_NOT_SUPPORTED")

    monkeypatch.setattr(EmulatedCuda, "instantiate", refuse)
    result, graphed = run(with_graph(pedestrian(tmp_path, "cuda", video_path)), prepared_example, tmp_path / "graph", monkeypatch, SHORT)
    graph = result.preprocess["cuda_graph"]
    assert (graph["captured"], graph["replayed_frames"]) == (False, 0) and len(graphed) == SHORT
    assert graph["reason"] == "the captured graph could not be instantiated: cuGraphInstantiate failed: CUDA_ERROR_NOT_SUPPORTED"
    assert result.preprocess["event_ms"]["infer"]["frames"] == SHORT
