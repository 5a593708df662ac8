"""Typed, frozen objects for a pipeline file.

One section per stage; each section becomes the keyword arguments of that stage. Every
model forbids unknown keys (the loader turns those into "did you mean" errors) and is
frozen: the pipeline is validated once, at load, and never changes afterwards.
"""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

PositiveMs = Annotated[float, Field(gt=0, le=3_600_000)]
Pixels = Annotated[int, Field(ge=1, le=16384)]

SOURCE_SCHEMES = ("file", "images", "v4l2", "csi", "gst", "synthetic")
STAGE_NAMES = ("preprocess", "infer", "postprocess", "sink")


class Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=False)


class Replay(Frozen):
    """How a recorded source is played back: deterministic runs need all three."""

    loop: bool = False
    frames: Annotated[int, Field(ge=1)] | None = None
    rate_fps: Annotated[float, Field(gt=0, le=1000)] | None = None
    # keep: process every frame, lateness shows as latency (acceptance runs).
    # drop: the newest frame wins when the pipeline is behind; every skipped frame is counted.
    late_frames: Literal["keep", "drop"] = "keep"


class Reconnect(Frozen):
    """A live camera that vanishes (cable, driver reset) is reopened with a doubling backoff."""

    initial_backoff_s: Annotated[float, Field(gt=0, le=60)] = 0.1
    max_backoff_s: Annotated[float, Field(gt=0, le=600)] = 5.0


class Source(Frozen):
    uri: str
    replay: Replay = Replay()
    reconnect: Reconnect | None = Reconnect()  # live sources only; null: the stream ends with the camera

    @field_validator("uri")
    @classmethod
    def _known_scheme(cls, uri: str) -> str:
        scheme, sep, rest = uri.partition("://")
        if not sep or scheme not in SOURCE_SCHEMES or not rest:
            allowed = ", ".join(f"{s}://..." for s in SOURCE_SCHEMES)
            raise ValueError(f"unknown source URI {uri!r}; allowed: {allowed}")
        return uri


class Resize(Frozen):
    width: Pixels
    height: Pixels
    mode: Literal["stretch", "letterbox"] = "stretch"
    # The sampling grid of ONNX Resize: which source position an output pixel reads.
    coordinates: Literal["half_pixel", "asymmetric", "align_corners"] = "half_pixel"
    pad_value: Annotated[int, Field(ge=0, le=255)] = 114


class Crop(Frozen):
    """A region of the source image (pixels) that is resized; the rest is ignored."""

    x: Annotated[int, Field(ge=0)] = 0
    y: Annotated[int, Field(ge=0)] = 0
    width: Pixels
    height: Pixels


class Normalize(Frozen):
    """value = (pixel * scale - mean[c]) / std[c], per output channel."""

    scale: float = 1.0
    mean: tuple[float, float, float] = (0.0, 0.0, 0.0)
    std: tuple[float, float, float] = (1.0, 1.0, 1.0)

    @field_validator("std")
    @classmethod
    def _nonzero_std(cls, std: tuple[float, float, float]) -> tuple[float, float, float]:
        if any(s == 0 for s in std):
            raise ValueError("std must not contain 0")
        return std

    @property
    def is_identity(self) -> bool:
        return self.scale == 1.0 and self.mean == (0.0, 0.0, 0.0) and self.std == (1.0, 1.0, 1.0)


class Preprocess(Frozen):
    resize: Resize
    crop: Crop | None = None
    color: Literal["rgb", "bgr", "gray"] = "rgb"
    normalize: Normalize = Normalize()
    layout: Literal["nchw", "nhwc"] = "nchw"
    dtype: Literal["float32", "float16", "uint8"] = "float32"

    @model_validator(mode="after")
    def _uint8_is_raw(self) -> Preprocess:
        if self.dtype == "uint8" and not self.normalize.is_identity:
            raise ValueError("dtype uint8 carries raw pixels: normalize must be left at its defaults")
        return self

    @property
    def channels(self) -> int:
        return 1 if self.color == "gray" else 3

    @property
    def tensor_shape(self) -> tuple[int, int, int, int]:
        h, w, c = self.resize.height, self.resize.width, self.channels
        return (1, c, h, w) if self.layout == "nchw" else (1, h, w, c)


class Prepare(Frozen):
    """How the original ONNX graph is cut down to what TensorRT and DLA can take."""

    inputs: dict[str, tuple[Annotated[int, Field(ge=1)], ...]]
    outputs: tuple[str, ...]
    fold_constants: bool = True

    @field_validator("inputs")
    @classmethod
    def _one_input(cls, inputs: dict[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
        if len(inputs) != 1:
            raise ValueError(f"exactly one input tensor with its static shape is needed, got {len(inputs)}")
        return inputs

    @field_validator("outputs")
    @classmethod
    def _some_outputs(cls, outputs: tuple[str, ...]) -> tuple[str, ...]:
        if not outputs:
            raise ValueError("name at least one output tensor")
        return outputs


class DlaPlacement(Frozen):
    """The DLA placement contract: the build fails (host prediction, then TensorRT's own answer) rather than fall back silently."""

    core: Annotated[int, Field(ge=0, le=1)] = 0  # Orin has DLA cores 0 and 1
    gpu_fallback: Literal["allowed", "forbidden"] = "allowed"
    max_gpu_layers: Annotated[int, Field(ge=0)] | None = None
    max_transitions: Annotated[int, Field(ge=0)] | None = None

    @model_validator(mode="after")
    def _consistent(self) -> DlaPlacement:
        if self.gpu_fallback == "forbidden" and self.max_gpu_layers:
            raise ValueError(f"gpu_fallback: forbidden allows no GPU layer, but max_gpu_layers is {self.max_gpu_layers}")
        return self


class Model(Frozen):
    path: str
    prepare: Prepare | None = None
    backend: Literal["auto", "onnxruntime", "tensorrt"] = "auto"  # auto: TensorRT where the release has an engine and a GPU
    threads: Annotated[int, Field(ge=1, le=256)] | None = None
    # int8: the host calibrates (the `calibration` section) and deploys only what passes its accuracy gate;
    # the CPU backend runs the Q/DQ model, TensorRT builds from the same ranges. fp16 is TensorRT's alone.
    precision: Literal["fp32", "fp16", "int8"] = "fp32"
    dla: DlaPlacement | None = None  # run on a DLA core under this contract (TensorRT builds only)
    profile_layers: bool = False  # TensorRT: per-layer times in the report (names the bottleneck layers; costs time)
    cuda_graph: bool = False  # TensorRT: replay the engine's launches as one CUDA graph (less CPU per frame)

    @model_validator(mode="after")
    def _graph_or_profile(self) -> Model:
        if self.cuda_graph and self.profile_layers:
            raise ValueError("cuda_graph and profile_layers exclude each other (TensorRT's layer profiler needs un-captured launches)")
        return self


class SsdDecoder(Frozen):
    kind: Literal["ssd"]
    box_encodings: str
    class_logits: str
    # A constant tensor of the ORIGINAL graph, read exactly at preparation.
    anchors: str
    anchor_layout: Literal["yxyx", "xyxy"] = "yxyx"
    # TF Object Detection API's FasterRcnnBoxCoder scales (y, x, h, w), from the training config.
    scale_factors: tuple[float, float, float, float] = (10.0, 10.0, 5.0, 5.0)
    score_activation: Literal["sigmoid", "softmax"] = "sigmoid"
    background_class: bool = True
    clip_boxes: bool = True


class YoloDecoder(Frozen):
    kind: Literal["yolo"]
    output: str
    # v5: [1, N, 5 + C] (cx, cy, w, h, objectness, classes); v8: [1, 4 + C, N].
    layout: Literal["v5", "v8"]


class Postprocess(Frozen):
    decoder: Annotated[Union[SsdDecoder, YoloDecoder], Field(discriminator="kind")]  # noqa: UP007
    classes: tuple[str, ...]
    score_threshold: Annotated[float, Field(ge=0, le=1)] = 0.3
    iou_threshold: Annotated[float, Field(gt=0, le=1)] = 0.6
    max_detections: Annotated[int, Field(ge=1, le=10000)] = 100

    @field_validator("classes")
    @classmethod
    def _some_classes(cls, classes: tuple[str, ...]) -> tuple[str, ...]:
        if not classes:
            raise ValueError("name at least one class")
        return classes


class JsonlSink(Frozen):
    kind: Literal["jsonl"]
    path: str = "detections.jsonl"


class VideoSink(Frozen):
    kind: Literal["video"]
    path: str = "annotated.mp4"
    fourcc: Annotated[str, Field(min_length=4, max_length=4)] = "mp4v"
    fps: Annotated[float, Field(gt=0, le=1000)] | None = None


class NullSink(Frozen):
    kind: Literal["null"]


Sink = Annotated[Union[JsonlSink, VideoSink, NullSink], Field(discriminator="kind")]  # noqa: UP007


class LatencyLimits(Frozen):
    p50_ms: PositiveMs | None = None
    p99_ms: PositiveMs | None = None
    p999_ms: PositiveMs | None = None
    p9999_ms: PositiveMs | None = None
    max_ms: PositiveMs | None = None

    def items(self) -> list[tuple[str, float]]:
        return [(name, value) for name, value in self.model_dump().items() if value is not None]


class EnvironmentRequirements(Frozen):
    """What the device must be set to for the measurement to count (checked against the captured environment)."""

    power_mode: str | None = None  # nvpmodel mode, by name ("MAXN") or number ("0")
    clocks_locked: bool = False  # jetson_clocks: CPU, GPU and EMC at their maximum, min == max
    cpu_governor: str | None = None  # e.g. "performance", on every online CPU
    max_temperature_c: Annotated[float, Field(gt=0, le=150)] | None = None
    max_load: Annotated[float, Field(gt=0)] | None = None  # 1-min load average before/during/after; over it: INCONCLUSIVE
    on_unmet: Literal["fail", "warn"] = "fail"  # warn: an unmet or unreadable requirement is reported, skipped in JUnit

    @field_validator("power_mode", mode="before")
    @classmethod
    def _mode_as_text(cls, mode: object) -> object:
        return str(mode) if isinstance(mode, int) and not isinstance(mode, bool) else mode


class AccuracyAcceptance(Frozen):
    """The validation run's detections against the host's FP32 reference on the same frames."""

    min_recall: Annotated[float, Field(ge=0, le=1)] = 0.95
    min_precision: Annotated[float, Field(ge=0, le=1)] = 0.95
    min_mean_iou: Annotated[float, Field(ge=0, le=1)] = 0.9
    max_mean_score_drift: Annotated[float, Field(ge=0, le=1)] = 0.05


class Determinism(Frozen):
    """Two runs on the same replay: identical outputs, or within these tolerances per matched detection."""

    max_score_diff: Annotated[float, Field(ge=0, le=1)] = 0.0
    min_iou: Annotated[float, Field(ge=0, le=1)] = 1.0


class Budgets(Frozen):
    warmup_frames: Annotated[int, Field(ge=0)] = 0
    end_to_end: LatencyLimits | None = None
    stages: dict[Literal["preprocess", "infer", "postprocess", "sink"], LatencyLimits] = {}
    max_dropped: Annotated[int, Field(ge=0)] | None = None
    deadline_ms: PositiveMs | None = None  # per frame, end to end from capture; a dropped frame misses it
    max_miss_ratio: Annotated[float, Field(ge=0, le=1)] | None = None
    max_consecutive_misses: Annotated[int, Field(ge=0)] | None = None
    max_jitter_ms: PositiveMs | None = None  # end to end p99.9 - p50
    max_drift_ms: PositiveMs | None = None  # median of the last third - median of the first third
    environment: EnvironmentRequirements | None = None
    accuracy: AccuracyAcceptance | None = None
    determinism: Determinism | None = None

    @model_validator(mode="after")
    def _misses_need_a_deadline(self) -> Budgets:
        for key in ("max_miss_ratio", "max_consecutive_misses"):
            if getattr(self, key) is not None and self.deadline_ms is None:
                raise ValueError(f"{key} counts deadline misses: set budgets.deadline_ms too (e.g. 33.3 at 30 fps)")
        return self


class AccuracyGate(Frozen):
    """INT8 against FP32 on held-out frames; a calibration that misses any of these is refused."""

    min_cosine: Annotated[float, Field(ge=-1, le=1)] = 0.99
    min_recall: Annotated[float, Field(ge=0, le=1)] = 0.9
    min_precision: Annotated[float, Field(ge=0, le=1)] = 0.9
    max_mean_score_drift: Annotated[float, Field(ge=0, le=1)] = 0.05


class Calibration(Frozen):
    """INT8 calibration: which frames (deterministic), which range method, and the accuracy gate."""

    source: str | None = None  # a file:// or images:// URI; default: the pipeline's own source
    frames: Annotated[int, Field(ge=1, le=100_000)] = 300
    stride: Annotated[int, Field(ge=1)] = 1
    seed: int = 0
    holdout_frames: Annotated[int, Field(ge=1)] = 50
    method: Literal["entropy", "minmax", "percentile"] = "entropy"
    percentile: Annotated[float, Field(gt=90, lt=100)] = 99.99
    accuracy: AccuracyGate = AccuracyGate()
    # A failing gate: rank layers by sensitivity and keep the worst out of INT8 until it passes (fp16), or refuse (none).
    fallback: Literal["fp16", "none"] = "fp16"
    fallback_max_layers: Annotated[int, Field(ge=1, le=1000)] = 12  # trials of the search, worst candidates first

    @field_validator("source")
    @classmethod
    def _recorded_source(cls, uri: str | None) -> str | None:
        if uri is not None and uri.partition("://")[0] not in ("file", "images"):
            raise ValueError(f"calibration frames come from a recording (file://, images://), not {uri!r}")
        return uri


class DegradedMode(Frozen):
    """When the runtime declares itself DEGRADED, what it does then, and when it is NOMINAL again."""

    after_misses: Annotated[int, Field(ge=1, le=100_000)] = 5  # consecutive deadline misses
    recover_after: Annotated[int, Field(ge=1, le=100_000)] = 30  # consecutive frames within the deadline
    process_every: Annotated[int, Field(ge=1, le=100)] = 2  # while DEGRADED: one frame in N, the rest shed and counted


class Service(Frozen):
    """The runtime as a long-running service on the vehicle (`python -m sdk serve`, systemd or the supervisor)."""

    watchdog_s: Annotated[float, Field(ge=0.5, le=600)] = 5.0  # no frame for this long: killed and restarted
    status_interval_s: Annotated[float, Field(ge=0.05, le=60)] = 1.0
    stop_timeout_s: Annotated[float, Field(ge=0.5, le=600)] = 10.0
    max_restarts: Annotated[int, Field(ge=0, le=1000)] = 5  # within restart_window_s, then the supervisor gives up
    restart_window_s: Annotated[float, Field(gt=0, le=86_400)] = 60.0
    restart_backoff_s: Annotated[float, Field(ge=0, le=600)] = 1.0  # doubles per restart within the window
    degraded: DegradedMode = DegradedMode()
    heartbeat_udp: Annotated[str, Field(pattern=r"^[A-Za-z0-9.\-]{1,253}:[0-9]{1,5}$")] | None = None  # host:port
    cpu_affinity: tuple[Annotated[int, Field(ge=0, le=1023)], ...] | None = None
    realtime_priority: Annotated[int, Field(ge=1, le=99)] | None = None  # SCHED_FIFO, where permitted
    lock_memory: bool = False  # mlockall: no page faults in the frame loop, where permitted


class Pipeline(Frozen):
    version: Literal[1]
    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")]
    source: Source
    preprocess: Preprocess
    model: Model
    postprocess: Postprocess
    sinks: tuple[Sink, ...] = Field(default_factory=lambda: (JsonlSink(kind="jsonl"),))
    budgets: Budgets = Budgets()
    calibration: Calibration | None = None
    service: Service = Service()

    @model_validator(mode="before")
    @classmethod
    def _null_sink_kind(cls, data: object) -> object:
        # YAML reads `kind: null` as None; the sink is called "null", so take both spellings.
        if isinstance(data, dict) and isinstance(data.get("sinks"), list):
            sinks = [dict(s, kind="null") if isinstance(s, dict) and "kind" in s and s["kind"] is None else s for s in data["sinks"]]
            data = {**data, "sinks": sinks}
        return data

    @model_validator(mode="after")
    def _int8_needs_calibration(self) -> Pipeline:
        if self.model.precision == "int8" and self.calibration is None:
            raise ValueError("model.precision is int8 but there is no `calibration` section: INT8 ranges come from calibration frames")
        return self

    @model_validator(mode="after")
    def _prepared_input_matches_preprocess(self) -> Pipeline:
        if self.model.prepare is not None:
            ((name, shape),) = self.model.prepare.inputs.items()
            if tuple(shape) != self.preprocess.tensor_shape:
                raise ValueError(
                    f"model.prepare.inputs[{name!r}] is {list(shape)} but preprocess produces "
                    f"{list(self.preprocess.tensor_shape)} ({self.preprocess.layout})"
                )
        return self
