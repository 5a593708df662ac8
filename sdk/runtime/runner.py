"""The frame loop: sources -> batch -> preprocess -> infer -> decode -> cascade -> track -> sinks, timed per stage.

Stages are built by their packages' factories (`create_preprocessing`, `create_decoding`, `create_cascade`,
`create_tracking`, `create_sinks`; the cameras and the feed in `sdk.runtime.cameras`), opened in order and closed in reverse
(each is a context manager). A batch is one frame of each camera that delivered in time (one
camera: one frame); its frames share the preprocess and infer marks, then are decoded and written
one by one, so a frame's latency from its own capture includes the gather wait and its turn.
A frame that makes a stage raise is counted and skipped; a stage that fails every frame
for a long run is a broken pipeline and stops the run with the error it keeps raising.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

from sdk.artifacts import ModelArtifacts
from sdk.backends import create_backend
from sdk.cascade import create_cascade
from sdk.errors import ConfigError, SdkError
from sdk.postprocess.stage import create_decoding
from sdk.preprocess.stage import create_preprocessing
from sdk.runtime.cameras import CameraSet, batch_slots, create_feed, describe_batching, open_cameras, summed_counters
from sdk.runtime.constants import split_inputs
from sdk.runtime.gather import CameraSlot
from sdk.runtime.health import HealthMonitor
from sdk.runtime.recorder import LatencyRecorder
from sdk.runtime.result import CameraResult, RunResult
from sdk.sinks import create_sinks, live_view_sinks
from sdk.sources import StreamCounters
from sdk.spec.bounds import REPLAY_FRAMES_HINT, replay_frames_problem
from sdk.spec.loader import PipelineFile
from sdk.track.stage import create_tracking

MAX_CONSECUTIVE_ERRORS = 25
DEFAULT_RECORDER_CAPACITY = 1 << 16


class PipelineRunner:
    """Settings in the constructor; `run()` builds and opens every stage, loops, and closes them."""

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
        spinning: bool = True,
        backend_factory: Callable[[Path, int], object] | None = None,
        live_view: int | None | str = None,
        images: Path | None = None,
    ) -> None:
        self.pipeline = pipeline
        self.artifacts = artifacts
        self.output_dir = Path(output_dir)
        self.max_frames = max_frames
        self.result: RunResult | None = None  # the run under way (its stage errors, read by the service's log)
        self.on_frame = on_frame
        self.require_jsonl = require_jsonl
        self.monitor = monitor  # a service's health: degraded-mode shedding and per-frame latency
        self.retention = retention  # a service's outputs: rotating segments, free-space floors, periodic fsync
        self.sinks = None  # the SinkGroup while it runs (read by a service's status thread)
        self.spinning = spinning  # False: ONNX Runtime's idle threads sleep whatever model.spinning says (host work)
        self.on_idle = on_idle  # a live stream waiting for a frame (a reconnect) calls it every 0.25 s
        self.on_end = on_end  # the frames ended (before the stages close)
        # (model path, batch) -> an unopened Backend, in place of create_backend: for a tool that runs the runtime on an
        # engine of its own (tools/gpu_check/check.py: ONNX Runtime as the inference step of the real CUDA path).
        self.backend_factory = backend_factory
        # The live view: "pipeline" serves the pipeline's foxglove sink as it is (the service); any other run serves
        # none (None: a measuring run, a self-test, a reference run) or one on the port it was asked for (deploy
        # --live-view PORT; sdk.sinks.live_view_sinks): the sink's port is the service's.
        self.live_view = live_view
        self.images = images  # an evaluation run (sdk.runtime.evaluation_run): the folder its source replays
        self._cameras: list[CameraSlot] = []
        self._feed = None
        self._stopping = False

    @property
    def counters(self) -> StreamCounters | None:
        """The sources' counters while it runs, added up over the cameras (read by a service's status thread)."""
        return summed_counters([camera.stream.counters for camera in self._cameras]) if self._cameras else None

    @property
    def stream(self) -> CameraSet | None:
        """The cameras as one source (one camera is a set of one): its condition, reconnects and end."""
        return CameraSet([camera.stream for camera in self._cameras]) if self._cameras else None

    def live_state(self) -> dict:
        """The run's state as the live view shows it (read on its thread): a service's health (NOMINAL, DEGRADED, its
        misses and latency window), else RUNNING and the frames; the sources' counters; why it is degraded."""
        if self.monitor is not None:
            state = self.monitor.snapshot()
        else:
            state = {"state": "STOPPING" if self._stopping else "RUNNING", "frames": self.result.recorder.count if self.result else 0}
        counters = self.counters
        if counters is not None:
            state.update(dropped=counters.dropped, corrupt_frames=counters.corrupt, lost_frames=counters.lost)
            state["out_of_order_stamps"] = counters.out_of_order
        stream, sinks = self.stream, self.sinks
        source = stream.condition() if stream is not None else None
        state["conditions"] = ([source] if source else []) + (sinks.conditions() if sinks is not None else [])
        return state

    def stop(self) -> None:
        """End the run after the current frame (safe from a signal handler)."""
        self._stopping = True
        for camera in self._cameras:
            camera.stream.stop()
        if self._feed is not None:
            self._feed.stop()

    def run(self) -> RunResult:
        spec = self.pipeline.spec
        names = list(spec.cameras)
        for name, camera in spec.cameras.items():
            each = self.max_frames or camera.replay.frames
            problem = replay_frames_problem(each * len(names)) if each else None
            if problem is not None:  # before the records are allocated (--frames is not part of the file)
                what = "frames to run (--frames)" if self.max_frames else self.pipeline.source_key(name).replace(".uri", ".replay.frames")
                raise ConfigError(f"{self.pipeline.path}: {what}: {problem}", hint=REPLAY_FRAMES_HINT)
        cameras = open_cameras(self.pipeline, self.max_frames, wait_for_camera=self.monitor is not None, base=self.images)
        capacities = [self.max_frames or spec.cameras[c.name].replay.frames or DEFAULT_RECORDER_CAPACITY for c in cameras]
        recorder = LatencyRecorder(sum(capacities))  # every camera's frames, one key per (camera, frame)
        self._cameras = cameras
        feed = create_feed(self.pipeline, cameras)
        feed.on_idle, feed.on_end = self.on_idle, self.on_end
        self._feed = feed
        if self._stopping:  # stopped before the run began (SIGTERM during the model load)
            self.stop()
        with ExitStack() as stack:
            model_path = self.artifacts.model_for(spec.model.precision)
            backend = stack.enter_context(self._backend(model_path, len(cameras) if spec.batch.size == "cameras" else 1))
            # The image input, and the constants of model.inputs written into their buffers once (sdk.runtime.constants).
            image_input, input_buffer = split_inputs(backend, dict(spec.model.inputs), model_path)
            batch = batch_slots(self.pipeline, input_buffer, model_path)
            kernels = self.artifacts.folder.parent / "kernels"  # the release's CUDA kernels (preprocess.device)
            preprocess = stack.enter_context(create_preprocessing(self.pipeline, backend, image_input, batch, kernels))
            tensors = self.artifacts.load_tensors()  # the SSD anchors read at preparation (the first model's and the steps')
            decode = stack.enter_context(create_decoding(self.pipeline, backend.outputs, tensors, batch, preprocess.session))
            cascade = stack.enter_context(create_cascade(spec.cascade, self.pipeline.folder, tensors))
            track = stack.enter_context(create_tracking(self.pipeline))
            frames = stack.enter_context(feed)
            rates = {c.name: spec.cameras[c.name].replay.rate_fps or c.stream.reader.nominal_fps or 30.0 for c in cameras}
            specs = spec.sinks if self.live_view == "pipeline" else live_view_sinks(spec.sinks, self.live_view)
            sinks = create_sinks(
                specs, self.output_dir, fps=rates[cameras[0].name], require_jsonl=self.require_jsonl, retention=self.retention, cameras=rates
            )
            self.sinks = stack.enter_context(sinks)
            note = f"TensorRT engine, {spec.model.precision}" if backend.name == "tensorrt" else _precision_note(spec.model.precision)
            result = self.result = RunResult(recorder, StreamCounters(), backend=f"{backend.describe()}, {note}", preprocess=preprocess.report())
            result.postprocess = decode.describe()
            result.batch, result.batching = batch, describe_batching(len(cameras), batch)
            for camera, capacity in zip(cameras, capacities, strict=True):
                replay = spec.cameras[camera.name].replay.model_dump()
                asked = self.max_frames or spec.cameras[camera.name].replay.frames
                result.cameras[camera.name] = CameraResult(LatencyRecorder(capacity), camera.stream.counters, replay=replay, asked=asked)
            sinks.watch(self.live_state, deadlines(spec, [c.name for c in cameras]))
            started = time.perf_counter()
            try:
                self._loop(frames, preprocess, backend, decode, cascade, track, sinks, result)
            finally:
                result.wall_s = time.perf_counter() - started
                result.preprocess = preprocess.report()  # with the run's event times and decode counts
                result.cascade_ms = cascade.latencies_ms()
                for camera in cameras:
                    result.cameras[camera.name].skipped_slots = camera.skipped_slots
                    result.cameras[camera.name].source_ended = camera.stream.source_ended
                result.counters = summed_counters([camera.stream.counters for camera in cameras])
            # TensorRT with profile_layers: the bottleneck layers, by name (other backends report none)
            result.slowest_layers = [(name, round(ms / max(result.frames, 1), 4)) for name, ms in backend.slowest_layers(10)]
        result.outputs = sinks.describe()  # closed: a file removed before its publication is counted
        return result

    def _backend(self, model_path: Path, batch_size: int):
        """The inference engine for `batch_size` frames a call, unopened: the pipeline's backend, or the caller's own."""
        if self.backend_factory is not None:
            return self.backend_factory(model_path, batch_size)
        model = self.pipeline.spec.model
        return create_backend(
            model.backend,
            model_path,
            threads=model.threads,
            engine_path=self.artifacts.engine_path,
            declared=self.artifacts.declared_tensors(),
            dla_core=model.dla.core if model.dla is not None else None,
            profile_layers=model.profile_layers,
            cuda_graph=model.cuda_graph,
            batch=batch_size,
            spinning=self.spinning and model.spinning,
        )

    def _loop(self, feed, preprocess, backend, decode, cascade, track, sinks, result: RunResult) -> None:
        clock = time.monotonic_ns
        record = result.recorder.record
        on_frame = self.on_frame
        consecutive = 0
        monitor = self.monitor
        preprocessors, decoders = preprocess.by_camera, decode.by_slot
        batched = result.batch > 1
        named = self.pipeline.spec.multi_camera  # `sources:`: the cameras have names, and errors say which
        own = {name: camera.recorder.record for name, camera in result.cameras.items()}
        count = len(result.cameras)
        marks = [0] * 6
        infer = preprocess.infer_step(backend)
        timed = bool(sinks.timed_sinks)
        for batch in feed.batches():
            if self._stopping:
                break
            if monitor is not None:
                batch = [(camera, frame) for camera, frame in batch if monitor.admit(frame.index)]  # DEGRADED: shed, counted
                if not batch:
                    continue
            # One call for the batch (batched), or each frame through the same engine in turn (batch of 1).
            groups = [batch] if batched else [[item] for item in batch]
            for group in groups:
                stage = "preprocess"
                index = group[0][1].index
                try:
                    start = clock()
                    geometries = [preprocessors[camera.index](frame.image) for camera, frame in group]
                    preprocessed = clock()
                    stage = "infer"
                    infer()
                    inferred = clock()
                    done = []
                    for (camera, frame), geometry in zip(group, geometries, strict=True):
                        index = frame.index
                        stage = "postprocess"
                        detections = decoders[camera.index if batched else 0](geometry)
                        detections = track(camera.name, cascade(frame.image, detections))
                        decoded = clock()
                        stage = "sink"
                        sinks(frame, detections)
                        done.append((camera, frame, decoded, clock(), detections))
                except SdkError:
                    raise
                except Exception as exc:  # a bad frame must not take the run down: count, skip
                    result.stage_errors[stage] = result.stage_errors.get(stage, 0) + 1
                    camera_note = f"camera {group[0][0].name}: " if named else ""
                    result.last_error = f"{camera_note}frame {index}: {stage}: {type(exc).__name__}: {exc}"
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
                for camera, frame, decoded, written, detections in done:
                    marks[0], marks[1], marks[2], marks[3], marks[4], marks[5] = frame.t_capture_ns, start, preprocessed, inferred, decoded, written
                    digest = detections.digest()  # after the last mark: not part of the latency
                    own[camera.name](frame.index, marks, digest)
                    record(frame.index * count + camera.index, marks, digest)  # one key per (camera, frame)
                    if monitor is not None:
                        monitor.frame(marks[5] - marks[0])
                    if timed:
                        sinks.timed(frame, marks)
                    if on_frame is not None:
                        on_frame(result.recorder.count)


def deadlines(spec, names: list[str]) -> dict[str | None, float]:
    """Each camera's deadline in ms (its own budget's, else the pipeline's), keyed None with one camera."""
    out = {}
    for name in names:
        budget = spec.budgets.cameras.get(name)
        deadline = (budget.deadline_ms if budget is not None else None) or spec.budgets.deadline_ms
        if deadline is not None:
            out[name if len(names) > 1 else None] = deadline
    return out


def _precision_note(precision: str) -> str:
    # The CPU backend has no FP16 kernels worth the name: it runs the FP32 model and says so.
    return {"fp32": "FP32 model", "int8": "INT8 Q/DQ model", "fp16": "FP32 model (fp16 is a TensorRT setting)"}[precision]
