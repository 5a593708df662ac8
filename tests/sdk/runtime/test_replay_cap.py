"""A run told to play more frames than the replay cap is refused before its records are allocated."""

from __future__ import annotations

import pytest

import sdk.runtime.runner as runner_module
from sdk.errors import ConfigError
from sdk.runtime.recorder import COLUMNS, LatencyRecorder
from sdk.runtime.runner import PipelineRunner
from sdk.spec import load_pipeline
from sdk.spec.bounds import MAX_REPLAY_FRAMES, RECORD_BYTES_PER_FRAME

PIPELINE = """\
version: 1
name: capped
source: {uri: "synthetic://boxes?width=64&height=48&frames=10"}
preprocess: {resize: {width: 32, height: 32}}
model: {path: tiny.onnx}
postprocess: {decoder: {kind: yolo, output: output0, layout: v5}, classes: [car]}
"""


def test_the_cap_counts_the_bytes_the_recorder_keeps_a_frame():
    recorder = LatencyRecorder(4)
    kept = sum(array.itemsize * (array.size // 4) for array in (recorder._times, recorder._frames, recorder._digests))
    assert kept == RECORD_BYTES_PER_FRAME == 8 * (COLUMNS + 2)


def test_frames_past_the_cap_are_refused_before_anything_is_allocated(tmp_path, monkeypatch):
    (tmp_path / "p.yaml").write_text(PIPELINE)
    pipeline = load_pipeline(tmp_path / "p.yaml", check_files=False)

    def no_allocation(capacity):
        raise AssertionError(f"allocated records for {capacity} frames")

    monkeypatch.setattr(runner_module, "LatencyRecorder", no_allocation)
    runner = PipelineRunner(pipeline, artifacts=None, output_dir=tmp_path / "out", max_frames=100_000_000)  # `--frames 100000000`
    with pytest.raises(ConfigError) as info:
        runner.run()
    message = info.value.message
    assert "\n" not in message and message.startswith(f"{tmp_path / 'p.yaml'}: frames to run (--frames): ")
    assert "100000000 frames would take 5.96 GiB of run records" in message and f"at most {MAX_REPLAY_FRAMES} frames" in message
    assert not (tmp_path / "out").exists()


def test_the_source_ended_note_counts_what_the_source_delivered_not_what_was_recorded():
    from types import SimpleNamespace

    from sdk.runtime.report import source_and_output_notes
    from sdk.runtime.result import CameraResult, RunResult
    from sdk.sources.stream import StreamCounters

    spec = SimpleNamespace(cameras={"camera": SimpleNamespace(uri="file://clip.mp4")}, multi_camera=False)

    def notes(delivered: int) -> list[str]:
        camera = CameraResult(LatencyRecorder(16), StreamCounters(delivered=delivered), asked=9, source_ended=True)
        return source_and_output_notes(spec, RunResult(LatencyRecorder(16), StreamCounters(), cameras={"camera": camera}))

    assert notes(9) == []  # all nine delivered, none recorded (a stage failed on each): the source did not end early
    assert notes(6) == ["file://clip.mp4: the source ended after 6 frame(s), before the 9 asked (--frames or replay.frames): "
                        "a recording plays once unless source.replay.loop is true"]
