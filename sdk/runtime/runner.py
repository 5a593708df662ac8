"""The frame loop: source -> preprocess -> infer -> postprocess (-> track) -> sink, timed per stage.

A pipeline with a `track:` section runs its tracker (sdk/track, one per camera) right after NMS; its time is
part of the postprocess stage (the report's stage names do not change).

Stages are built and opened in order and closed in reverse (each is a context manager).
A frame that makes a stage raise is counted and skipped; a stage that fails every frame
for a long run is a broken pipeline and stops the run with the error it keeps raising.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

from sdk.artifacts import ModelArtifacts
from sdk.backends import create_backend
from sdk.errors import ConfigError, SdkError
from sdk.postprocess import create_postprocessor, describe
from sdk.preprocess import create_preprocessor
from sdk.runtime.constants import split_inputs
from sdk.runtime.recorder import LatencyRecorder
from sdk.service.health import HealthMonitor
from sdk.sinks import create_sinks
from sdk.sources import FrameStream, StreamCounters, open_stream
from sdk.spec.bounds import REPLAY_FRAMES_HINT, replay_frames_problem
from sdk.spec.loader import PipelineFile
from sdk.track import create_tracker

MAX_CONSECUTIVE_ERRORS = 25
DEFAULT_RECORDER_CAPACITY = 1 << 16


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
    cascade_ms: dict[str, list[float]] = field(default_factory=dict)  # per cascade step, ms per frame (within postprocess)

    @property
    def frames(self) -> int:
        return self.recorder.count


class PipelineRunner:
    """Settings in the constructor; `run()` opens every stage, loops, and closes them."""

    def __init__(
        self,
        pipeline: PipelineFile,
        artifacts: ModelArtifacts,
        output_dir: Path,
        *,
        max_frames: int | None = None,
        on_frame: Callable[[int], None] | None = None,
        require_jsonl: bool = True,
        monitor: HealthMonitor | None = None,
        retention=None,
        on_idle: Callable[[], None] | None = None,
        on_end: Callable[[], None] | None = None,
    ) -> None:
        self.pipeline = pipeline
        self.artifacts = artifacts
        self.output_dir = Path(output_dir)
        self.max_frames = max_frames
        self.on_frame = on_frame
        self.require_jsonl = require_jsonl
        self.monitor = monitor  # a service's health: degraded-mode shedding and per-frame latency
        self.retention = retention  # a service's outputs: rotating segments, free-space floors, periodic fsync
        self.sinks = None  # the SinkGroup while it runs (read by a service's status thread)
        self.on_idle = on_idle  # a live stream waiting for a frame (a reconnect) calls it every 0.25 s
        self.on_end = on_end  # the frames ended (before the stages close)
        self._stream: FrameStream | None = None
        self._stopping = False
        self._cascade = None

    @property
    def counters(self) -> StreamCounters | None:
        """The source's counters while it runs (read by a service's status thread)."""
        return self._stream.counters if self._stream is not None else None

    @property
    def stream(self) -> FrameStream | None:
        return self._stream

    def stop(self) -> None:
        """End the run after the current frame (safe from a signal handler)."""
        self._stopping = True
        if self._stream is not None:
            self._stream.stop()

    def run(self) -> RunResult:
        spec = self.pipeline.spec
        limit = self.max_frames or spec.source.replay.frames
        problem = replay_frames_problem(limit) if limit else None
        if problem is not None:  # before the records are allocated (--frames is not part of the file)
            what = "frames to run (--frames)" if self.max_frames else "source.replay.frames"
            raise ConfigError(f"{self.pipeline.path}: {what}: {problem}", hint=REPLAY_FRAMES_HINT)
        recorder = LatencyRecorder(limit or DEFAULT_RECORDER_CAPACITY)
        stream = open_stream(spec.source.uri, spec.source.replay, self.pipeline.folder, max_frames=limit, reconnect=spec.source.reconnect)
        stream.wait_for_camera = self.monitor is not None  # only a service (it has a health monitor) waits for a missing camera
        self._stream = stream
        stream.on_idle, stream.on_end = self.on_idle, self.on_end
        if self._stopping:  # stopped before the run began (SIGTERM during the model load)
            stream.stop()
        with ExitStack() as stack:
            model_path = self.artifacts.model_for(spec.model.precision)
            backend = stack.enter_context(
                create_backend(
                    spec.model.backend,
                    model_path,
                    threads=spec.model.threads,
                    engine_path=self.artifacts.engine_path,
                    declared=self.artifacts.declared_tensors(),
                    dla_core=spec.model.dla.core if spec.model.dla is not None else None,
                    profile_layers=spec.model.profile_layers,
                    cuda_graph=spec.model.cuda_graph,
                )
            )
            # The image input, and the constants of model.inputs written into their buffers once (sdk.runtime.constants).
            image_input, _ = split_inputs(backend, dict(spec.model.inputs), model_path)
            kernels, where = self.artifacts.folder.parent / "kernels", f"{self.pipeline.path}: preprocess.device"
            preprocess = stack.enter_context(create_preprocessor(spec.preprocess, backend, image_input=image_input, kernels_dir=kernels, where=where))
            net_size = (spec.preprocess.resize.width, spec.preprocess.resize.height)
            postprocess = stack.enter_context(
                create_postprocessor(
                    spec.postprocess,
                    backend.outputs,
                    net_size,
                    self.artifacts.load_tensors(),
                    self.pipeline.class_names(),
                    session=preprocess.session,
                    plugin_folder=self.pipeline.plugin_folder(),
                )
            )
            tracker = create_tracker(spec.track)  # None: the pipeline does not track
            if tracker is not None:
                stack.enter_context(tracker)
            if spec.cascade:  # models on the crops of the detections (sdk.cascade); their time is the postprocess stage's
                from sdk.cascade import CascadeStage

                self._cascade = stack.enter_context(CascadeStage(spec.cascade, self.pipeline.folder))
            frames = stack.enter_context(stream)
            fps = spec.source.replay.rate_fps or frames.reader.nominal_fps or 30.0
            sinks = create_sinks(spec.sinks, self.output_dir, fps=fps, require_jsonl=self.require_jsonl, retention=self.retention)
            self.sinks = stack.enter_context(sinks)
            note = f"TensorRT engine, {spec.model.precision}" if backend.name == "tensorrt" else _precision_note(spec.model.precision)
            result = RunResult(recorder, stream.counters, backend=f"{backend.describe()}, {note}", preprocess=preprocess.report())
            result.postprocess = describe(postprocess)
            started = time.perf_counter()
            self._loop(frames, preprocess, backend, postprocess, tracker, sinks, result)
            result.wall_s = time.perf_counter() - started
            result.preprocess = preprocess.report()  # with the run's event times and decode counts
            if self._cascade is not None:
                result.cascade_ms = self._cascade.latencies_ms()
            if hasattr(backend, "slowest_layers"):  # TensorRT with profile_layers: the bottleneck layers, by name
                result.slowest_layers = [(name, round(ms / max(result.frames, 1), 4)) for name, ms in backend.slowest_layers(10)]
        return result

    def _loop(self, frames, preprocess, backend, postprocess, tracker, sinks, result: RunResult) -> None:
        clock = time.monotonic_ns
        record = result.recorder.record
        on_frame = self.on_frame
        consecutive = 0
        marks = [0] * 6
        monitor = self.monitor
        cascade = self._cascade
        for frame in frames:
            if self._stopping:
                break
            if monitor is not None and not monitor.admit(frame.index):
                continue  # DEGRADED: shed, and counted by the monitor
            stage = "preprocess"
            try:
                marks[0] = frame.t_capture_ns
                marks[1] = clock()
                geometry = preprocess(frame.image)
                marks[2] = clock()
                stage = "infer"
                backend.infer()
                marks[3] = clock()
                stage = "postprocess"
                detections = postprocess(geometry)
                if cascade is not None:
                    cascade(frame.image, detections)
                if tracker is not None:
                    detections = tracker.update(detections)  # timed with postprocess
                marks[4] = clock()
                stage = "sink"
                sinks(frame, detections)
                marks[5] = clock()
            except SdkError:
                raise
            except Exception as exc:  # a bad frame must not take the run down: count, skip
                result.stage_errors[stage] = result.stage_errors.get(stage, 0) + 1
                result.last_error = f"frame {frame.index}: {stage}: {type(exc).__name__}: {exc}"
                consecutive += 1
                if monitor is not None:
                    monitor.failed()  # an error storm is a run of misses: it escalates to DEGRADED
                if consecutive >= MAX_CONSECUTIVE_ERRORS:
                    raise SdkError(
                        f"stage {stage} failed on {consecutive} frames in a row; last: {result.last_error}",
                        hint="the pipeline is broken, not one frame: check the stage's settings",
                    ) from exc
                continue
            consecutive = 0
            record(frame.index, marks, detections.digest())  # after the last mark: not part of the latency
            if monitor is not None:
                monitor.frame(marks[5] - marks[0])
            if on_frame is not None:
                on_frame(result.recorder.count)


def _precision_note(precision: str) -> str:
    # The CPU backend has no FP16 kernels worth the name: it runs the FP32 model and says so.
    return {"fp32": "FP32 model", "int8": "INT8 Q/DQ model", "fp16": "FP32 model (fp16 is a TensorRT setting)"}[precision]
