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

from ..preprocess.test_cuda_path import FRAMES, pedestrian, run


def with_graph(path, extra: str = ""):
    text = path.read_text().replace("  device: cuda\n", f"  device: cuda\n  cuda_graph: true\n{extra}", 1)
    graphed = path.with_name(path.stem + "_graph.yaml")
    graphed.write_text(text)
    return graphed


def test_the_emulated_stream_records_a_capture_and_replays_it():
    with EmulatedCuda("copy") as gpu:
        host = np.arange(16, dtype=np.uint8)
        device = gpu.device_buffer(16)
        back = np.zeros(16, np.uint8)
        graph = FrameGraph(gpu)

        def frame() -> bool:
            gpu.upload(device, host)
            gpu.download(back, device)
            return True

        assert graph.capture(frame)
        assert not back.any()  # capturing ran nothing
        host[:] = 7  # a new frame in the same buffer
        graph.launch()
        assert (back == 7).all()
        assert graph.report() == {"requested": True, "captured": True, "replayed_frames": 1}
        assert gpu.bytes_copied == {"to_device": 16, "to_host": 16}


def test_waiting_inside_a_capture_is_an_error_as_on_a_gpu():
    with EmulatedCuda() as gpu:
        graph = FrameGraph(gpu)

        def frame() -> bool:
            gpu.synchronize()
            return True

        assert not graph.capture(frame)
        assert graph.reason == (
            "the frame cannot be captured: synchronising the stream while the stream is being captured (CUDA: cudaErrorStreamCaptureUnsupported)"
        )
        gpu.synchronize()  # the stream is usable again, and runs what it gets at once: nothing is recorded any more
        device, back = gpu.device_buffer(4), np.zeros(4, np.uint8)
        gpu.download(back, device)
        assert (back == UNINITIALISED).all()
        with pytest.raises(BackendError, match="not being captured"):
            gpu.end_capture()


def test_the_replayed_frames_give_the_uncaptured_paths_detections(tmp_path, monkeypatch, prepared_example, video_path):
    """The example (SSD) on the emulated CUDA path, with and without the graph: the same detections frame by frame, every
    frame after the warm-up replayed, and the stage times still from the events recorded inside the graph."""
    plain_path = pedestrian(tmp_path, "cuda", video_path)
    plain_result, plain = run(plain_path, prepared_example, tmp_path / "plain", monkeypatch, emulate=True)
    graph_result, graphed = run(with_graph(plain_path), prepared_example, tmp_path / "graph", monkeypatch, emulate=True)
    section = graph_result.preprocess
    assert section["cuda_graph"] == {"requested": True, "captured": True, "replayed_frames": FRAMES - 1}
    assert "cuda_graph" not in plain_result.preprocess
    assert {stage: times["frames"] for stage, times in section["event_ms"].items()} == {"preprocess": FRAMES, "infer": FRAMES, "decode": FRAMES}
    assert section["decode"]["device"] == "cuda" and section["decode"]["overflow_frames"] == 0
    assert len(plain) == len(graphed) == FRAMES and sum(len(line["detections"]) for line in plain) > 30
    assert [line["detections"] for line in graphed] == [line["detections"] for line in plain]


def test_an_engine_that_refuses_capture_runs_uncaptured_and_the_report_says_why(tmp_path, monkeypatch, prepared_example, video_path):
    """TensorRT's enqueueV3 returns false under capture for engines it cannot capture: the frames run un-captured."""
    monkeypatch.setattr(CudaSession, "engine_enqueue", lambda self: False)
    plain_path = pedestrian(tmp_path, "cuda", video_path)
    _, plain = run(plain_path, prepared_example, tmp_path / "plain", monkeypatch, emulate=True)
    result, graphed = run(with_graph(plain_path), prepared_example, tmp_path / "graph", monkeypatch, emulate=True)
    assert result.preprocess["cuda_graph"] == {
        "requested": True,
        "captured": False,
        "replayed_frames": 0,
        "reason": "TensorRT's enqueueV3 refused to run under stream capture (data-dependent shapes, loops, or a plugin)",
    }
    assert [line["detections"] for line in graphed] == [line["detections"] for line in plain]


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
