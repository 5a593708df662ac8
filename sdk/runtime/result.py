"""What a run gives back: the whole run's timings and counters, and each camera's share (one camera is a set of one)."""

from __future__ import annotations

from dataclasses import dataclass, field

from sdk.runtime.recorder import LatencyRecorder
from sdk.sources import StreamCounters


@dataclass
class CameraResult:
    """One camera's share of the run: its frames' timings, its source's counters, its empty batch slots."""

    recorder: LatencyRecorder
    counters: StreamCounters
    skipped_slots: int = 0
    replay: dict = field(default_factory=dict)
    asked: int | None = None  # the frames the run asked of this camera (--frames or replay.frames), None: no limit
    source_ended: bool = False  # the source ran out (a recording played once), not the frame limit or a stop


@dataclass
class RunResult:
    recorder: LatencyRecorder
    counters: StreamCounters
    stage_errors: dict[str, int] = field(default_factory=dict)
    last_error: str | None = None
    backend: str = ""
    preprocess: dict = field(default_factory=dict)  # the device used and why, and how (sampler, OpenCV or kernel, event times)
    postprocess: str = ""  # the decoder, and where NMS ran (the SDK's, or the model's own: then the SDK's is skipped)
    wall_s: float = 0.0
    slowest_layers: list[tuple[str, float]] = field(default_factory=list)  # (layer, ms per frame), TensorRT profiling only
    cameras: dict[str, CameraResult] = field(default_factory=dict)
    batching: str = ""  # how frames went through the engine (batched, or one after another)
    batch: int = 1  # frames per inference call
    cascade_ms: dict[str, list[float]] = field(default_factory=dict)  # per cascade step, ms per frame (within postprocess)
    outputs: list[dict] = field(default_factory=list)  # each output's frames written and not written (and why), once closed

    @property
    def frames(self) -> int:
        return self.recorder.count


__all__ = ["CameraResult", "RunResult"]
