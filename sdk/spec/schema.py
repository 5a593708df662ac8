"""Typed, frozen objects for a pipeline file.

One section per stage; each section becomes the keyword arguments of that stage. Every
model forbids unknown keys (the loader turns those into "did you mean" errors) and is
frozen: the pipeline is validated once, at load, and never changes afterwards. Every number
has a documented range (`sdk.spec.bounds`). The sections `source`, `preprocess`, `budgets`,
`calibration` and `service` live in modules of their own and are re-exported here.
"""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import Field, field_validator, model_validator

from sdk.spec.bounds import MAX_HELD_FRAMES_BYTES, MAX_TENSOR_SIDE, Flag, Frozen, Int, Real, bounds_error, shown, size_text
from sdk.spec.budgets import AccuracyAcceptance, Budgets, Determinism, EnvironmentRequirements, LatencyLimits, PositiveMs
from sdk.spec.calibration import AccuracyGate, Calibration
from sdk.spec.preprocess import CROP_HINT, Crop, Normalize, Preprocess, Resize, crop_outside
from sdk.spec.service import DegradedMode, Health, Retention, Service
from sdk.spec.source import SOURCE_SCHEMES, Reconnect, Replay, Source, synthetic_size

Pixels = Int(1, MAX_TENSOR_SIDE, "pixels")
STAGE_NAMES = ("preprocess", "infer", "postprocess", "sink")


class Prepare(Frozen):
    """How the original ONNX graph is cut down to what TensorRT and DLA can take."""

    inputs: dict[str, Annotated[tuple[Int(1, 65536, "a static dimension"), ...], Field(max_length=8)]]
    outputs: tuple[str, ...]
    fold_constants: Flag = True

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

    core: Int(0, 1, "DLA core; Orin has cores 0 and 1") = 0
    gpu_fallback: Literal["allowed", "forbidden"] = "allowed"
    max_gpu_layers: Int(0, 100_000, "layers left on the GPU, at most") | None = None
    max_transitions: Int(0, 100_000, "DLA <-> GPU transitions, at most") | None = None

    @model_validator(mode="after")
    def _consistent(self) -> DlaPlacement:
        if self.gpu_fallback == "forbidden" and self.max_gpu_layers:
            raise ValueError(f"gpu_fallback: forbidden allows no GPU layer, but max_gpu_layers is {self.max_gpu_layers}")
        return self


class Model(Frozen):
    path: str
    prepare: Prepare | None = None
    backend: Literal["auto", "onnxruntime", "tensorrt"] = "auto"  # auto: TensorRT where the release has an engine and a GPU
    threads: Int(1, 256, "CPU threads of ONNX Runtime; null: its default") | None = None
    # int8: the host calibrates (the `calibration` section) and deploys only what passes its accuracy gate;
    # the CPU backend runs the Q/DQ model, TensorRT builds from the same ranges. fp16 is TensorRT's alone.
    precision: Literal["fp32", "fp16", "int8"] = "fp32"
    dla: DlaPlacement | None = None  # run on a DLA core under this contract (TensorRT builds only)
    profile_layers: Flag = False  # TensorRT: per-layer times in the report (names the bottleneck layers; costs time)
    cuda_graph: Flag = False  # TensorRT: replay the engine's launches as one CUDA graph (less CPU per frame)

    @model_validator(mode="after")
    def _graph_or_profile(self) -> Model:
        if self.cuda_graph and self.profile_layers:
            raise ValueError("cuda_graph and profile_layers exclude each other (TensorRT's layer profiler needs un-captured launches)")
        return self


_BoxScale = Real("box coder scale (y, x, h, w)", gt=0, le=10_000)


class SsdDecoder(Frozen):
    kind: Literal["ssd"]
    box_encodings: str
    class_logits: str
    # A constant tensor of the ORIGINAL graph, read exactly at preparation.
    anchors: str
    anchor_layout: Literal["yxyx", "xyxy"] = "yxyx"
    # TF Object Detection API's FasterRcnnBoxCoder scales (y, x, h, w), from the training config.
    scale_factors: tuple[_BoxScale, _BoxScale, _BoxScale, _BoxScale] = (10.0, 10.0, 5.0, 5.0)
    score_activation: Literal["sigmoid", "softmax"] = "sigmoid"
    background_class: Flag = True
    clip_boxes: Flag = True


class YoloDecoder(Frozen):
    kind: Literal["yolo"]
    output: str
    # v5: [1, N, 5 + C] (cx, cy, w, h, objectness, classes); v8: [1, 4 + C, N].
    layout: Literal["v5", "v8"]


class Postprocess(Frozen):
    decoder: Annotated[Union[SsdDecoder, YoloDecoder], Field(discriminator="kind")]  # noqa: UP007
    classes: Annotated[tuple[str, ...], Field(max_length=10_000)]
    score_threshold: Real("detections scoring below are dropped", ge=0, le=1) = 0.3
    iou_threshold: Real("non-maximum suppression: overlap above which the lower score goes", gt=0, le=1) = 0.6
    max_detections: Int(1, 10000, "detections kept per frame, highest scores first") = 100

    @field_validator("classes")
    @classmethod
    def _some_classes(cls, classes: tuple[str, ...]) -> tuple[str, ...]:
        if not classes:
            raise ValueError("name at least one class")
        return classes


class Rotate(Frozen):
    """When a service's output closes its current file and begins the next (`service.retention` prunes the finished ones).

    A finished file is whole (a video plays to its end); a kill loses at most the current one's
    unsynced tail. Measuring runs (deploy, validation) write one file and do not rotate."""

    max_mb: Real("MiB at which the current file is finished and the next begun", gt=0, le=65_536) = 64
    max_age_s: Real("seconds after which the current file is finished and the next begun; null: by size only", ge=1, le=86_400) | None = None


class JsonlSink(Frozen):
    kind: Literal["jsonl"]
    path: str = "detections.jsonl"
    rotate: Rotate = Rotate()
    sync_interval_s: Real("seconds between fsyncs of the current file: a power cut loses at most this much", ge=0.05, le=60) = 1.0


class VideoSink(Frozen):
    kind: Literal["video"]
    path: str = "annotated.mp4"
    fourcc: Annotated[str, Field(min_length=4, max_length=4)] = "mp4v"
    fps: Real("frame rate written in the file; null: the source's", gt=0, le=1000) | None = None
    rotate: Rotate = Rotate(max_mb=256, max_age_s=60)  # a kill loses at most the current segment (a minute)


class NullSink(Frozen):
    kind: Literal["null"]


Sink = Annotated[Union[JsonlSink, VideoSink, NullSink], Field(discriminator="kind")]  # noqa: UP007


class Pipeline(Frozen):
    version: Literal[1]
    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")]
    source: Source
    preprocess: Preprocess
    model: Model
    postprocess: Postprocess
    sinks: Annotated[tuple[Sink, ...], Field(max_length=16)] = Field(default_factory=lambda: (JsonlSink(kind="jsonl"),))
    budgets: Budgets = Budgets()
    calibration: Calibration | None = None
    service: Service = Service()
    health: Health = Health()

    @field_validator("version", mode="before")
    @classmethod
    def _version_is_an_integer(cls, version: object) -> object:
        if isinstance(version, bool) or not isinstance(version, int):
            raise bounds_error(f"{shown(version)} is not a known version; allowed: 1")
        return version

    @model_validator(mode="before")
    @classmethod
    def _null_sink_kind(cls, data: object) -> object:
        # YAML reads `kind: null` as None; the sink is called "null", so take both spellings.
        if isinstance(data, dict) and isinstance(data.get("sinks"), list):
            sinks = [dict(s, kind="null") if isinstance(s, dict) and "kind" in s and s["kind"] is None else s for s in data["sinks"]]
            data = {**data, "sinks": sinks}
        return data

    @model_validator(mode="after")
    def _rotation_inside_retention(self) -> Pipeline:
        limit = self.service.retention.max_total_mb
        for index, sink in enumerate(self.sinks):
            rotate = getattr(sink, "rotate", None)
            if rotate is not None and rotate.max_mb * 2 > limit:
                raise bounds_error(
                    f"sinks[{index}].rotate.max_mb {rotate.max_mb:g} is more than half of service.retention.max_total_mb {limit:g}; "
                    "allowed: at most half (the bound holds a finished file and the current one)",
                    hint="lower rotate.max_mb or raise service.retention.max_total_mb",
                    path=("sinks", index, "rotate", "max_mb"),
                )
        return self

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

    @model_validator(mode="after")
    def _crop_inside_a_known_frame(self) -> Pipeline:
        crop = self.preprocess.crop
        if crop is not None and self.source.uri.startswith("synthetic://"):
            width, height = synthetic_size(self.source.uri)
            problem = crop_outside(crop, width, height)
            if problem is not None:
                key, message = problem
                raise bounds_error(message, hint=CROP_HINT, path=("preprocess", "crop", key))
        return self

    @model_validator(mode="after")
    def _held_frames_fit(self) -> Pipeline:
        calibration = self.calibration
        if calibration is None:
            return self
        each = self.preprocess.tensor_bytes
        need = calibration.holdout_frames * each
        if need > MAX_HELD_FRAMES_BYTES:
            shape = "x".join(str(d) for d in self.preprocess.tensor_shape)
            most = MAX_HELD_FRAMES_BYTES // each
            raise bounds_error(
                f"{calibration.holdout_frames} frames of {shape} {self.preprocess.dtype} would take {size_text(need)}; "
                f"allowed: at most {most} frames or {size_text(MAX_HELD_FRAMES_BYTES)} (the held-out frames cap: "
                "calibration keeps them in memory for the accuracy gate)",
                hint="lower calibration.holdout_frames",
                path=("calibration", "holdout_frames"),
            )
        return self


__all__ = [
    "SOURCE_SCHEMES",
    "STAGE_NAMES",
    "AccuracyAcceptance",
    "AccuracyGate",
    "Budgets",
    "Calibration",
    "Crop",
    "DegradedMode",
    "Determinism",
    "DlaPlacement",
    "EnvironmentRequirements",
    "Frozen",
    "JsonlSink",
    "LatencyLimits",
    "Model",
    "Normalize",
    "NullSink",
    "Pipeline",
    "Pixels",
    "PositiveMs",
    "Prepare",
    "Preprocess",
    "Reconnect",
    "Replay",
    "Resize",
    "Retention",
    "Rotate",
    "Service",
    "Sink",
    "Source",
    "SsdDecoder",
    "VideoSink",
    "YoloDecoder",
    "crop_outside",
    "synthetic_size",
]
