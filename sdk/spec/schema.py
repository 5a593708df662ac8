"""Typed, frozen objects for a pipeline file.

One section per stage; each section becomes the keyword arguments of that stage. Every
model forbids unknown keys (the loader turns those into "did you mean" errors) and is
frozen: the pipeline is validated once, at load, and never changes afterwards. Every number
has a documented range (`sdk.spec.bounds`). The sections `source`, `preprocess`, `budgets`,
`calibration`, `service`, `sinks` and `track` live in modules of their own and are re-exported here.
"""


from typing import Annotated, Literal, Union

from pydantic import Field, field_validator, model_validator

from sdk.spec.bounds import MAX_HELD_FRAMES_BYTES, MAX_TENSOR_SIDE, Flag, Frozen, Int, Real, bounds_error, shown, size_text
from sdk.spec.budgets import AccuracyAcceptance, AccuracyBudget, Budgets, Determinism, EnvironmentRequirements, LatencyLimits, PositiveMs
from sdk.spec.calibration import AccuracyGate, Calibration
from sdk.spec.cameras import CAMERA_NAME, CAMERA_NAME_RULE, MAX_CAMERAS, Batch, CameraSource, topic_cameras
from sdk.spec.cascade import Cascade
from sdk.spec.decoders import LABELLED, ClassifyDecoder, DbDecoder, NmsInsideDecoder, SegmentDecoder, YoloDecoder
from sdk.spec.evaluation import Evaluation
from sdk.spec.model_inputs import ModelInputs
from sdk.spec.plugin import PythonDecoder
from sdk.spec.preprocess import CROP_HINT, Crop, Normalize, Preprocess, Resize, crop_outside
from sdk.spec.service import DegradedMode, Health, Retention, Service
from sdk.spec.sinks import FoxgloveSink, JsonlSink, MaskSink, McapSink, NullSink, Rotate, Sink, VideoSink, check_outputs
from sdk.spec.source import SOURCE_SCHEMES, Reconnect, Replay, Source, synthetic_size
from sdk.spec.ssd import GeneratedAnchors, SsdAnchorOptions, SsdDecoder, check_anchors_on_input
from sdk.spec.track import Track

Pixels = Int(1, MAX_TENSOR_SIDE, "pixels")
STAGE_NAMES = ("preprocess", "infer", "postprocess", "sink")


class Prepare(Frozen):
    """How the original ONNX graph is cut down to what TensorRT and DLA can take."""

    inputs: dict[str, Annotated[tuple[Int(1, 65536, "a static dimension"), ...], Field(max_length=8)]]
    outputs: tuple[str, ...]
    fold_constants: Flag = True

    @field_validator("inputs")
    @classmethod
    def _some_inputs(cls, inputs: dict[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
        if not 1 <= len(inputs) <= 17:
            raise ValueError(f"the image input and any constant inputs (model.inputs), each with its static shape, are needed; got {len(inputs)}")
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
    def _consistent(self) -> "DlaPlacement":
        if self.gpu_fallback == "forbidden" and self.max_gpu_layers:
            raise ValueError(f"gpu_fallback: forbidden allows no GPU layer, but max_gpu_layers is {self.max_gpu_layers}")
        return self


class Model(Frozen):
    path: str
    prepare: Prepare | None = None
    backend: Literal["auto", "onnxruntime", "tensorrt"] = "auto"  # auto: TensorRT where the release has an engine and a GPU
    threads: Int(1, 256, "CPU threads of ONNX Runtime; null: its default") | None = None
    # ONNX Runtime: idle intra-op threads spin-wait (its default: the lowest latency on cores of their own) or,
    # with false, sleep: on cores shared with other work, about 40 % less CPU for ~1 ms of inference (decision 0914).
    spinning: Flag = True
    # int8: the host calibrates (the `calibration` section) and deploys only what passes its accuracy gate;
    # the CPU backend runs the Q/DQ model, TensorRT builds from the same ranges. fp16 is TensorRT's alone.
    precision: Literal["fp32", "fp16", "int8"] = "fp32"
    dla: DlaPlacement | None = None  # run on a DLA core under this contract (TensorRT builds only)
    profile_layers: Flag = False  # TensorRT: per-layer times in the report (names the bottleneck layers; costs time)
    cuda_graph: Flag = False  # TensorRT: replay the engine's launches as one CUDA graph (less CPU per frame)
    inputs: ModelInputs = Field(default_factory=dict)  # constant inputs besides the image, by name (sdk.spec.model_inputs)
    # The original an optimized model was made from (`sdk optimize`), relative to this file: every accuracy check
    # (deploy, validate) judges the run against the FP32 detections of this model, never of the optimized one.
    reference: str | None = None

    @model_validator(mode="after")
    def _graph_or_profile(self) -> "Model":
        if self.cuda_graph and self.profile_layers:
            raise ValueError("cuda_graph and profile_layers exclude each other (TensorRT's layer profiler needs un-captured launches)")
        return self


class Postprocess(Frozen):
    decoder: Annotated[
        Union[SsdDecoder, YoloDecoder, NmsInsideDecoder, ClassifyDecoder, SegmentDecoder, DbDecoder, PythonDecoder],  # noqa: UP007
        Field(discriminator="kind"),
    ]
    # Class names in the model's order; classify and segment may name a label file (decoder.labels) instead.
    classes: Annotated[tuple[str, ...], Field(max_length=10_000)] = ()
    score_threshold: Real("detections scoring below are dropped", ge=0, le=1) = 0.3
    iou_threshold: Real("non-maximum suppression: overlap above which the lower score goes", gt=0, le=1) = 0.6
    max_detections: Int(1, 10000, "detections kept per frame, highest scores first") = 100
    # Which boxes non-maximum suppression compares: those of one class (per_class), or all (class_agnostic, YOLOX's demo).
    nms: Literal["per_class", "class_agnostic"] = "per_class"

    @property
    def class_agnostic(self) -> bool:
        return self.nms == "class_agnostic"

    @model_validator(mode="after")
    def _some_classes(self) -> "Postprocess":
        labelled = isinstance(self.decoder, LABELLED) and self.decoder.labels is not None
        if labelled and self.classes:
            raise ValueError("name the classes once: postprocess.classes or postprocess.decoder.labels (a file), not both")
        if "classes" not in self.model_fields_set and not labelled:
            where = ", or a label file in decoder.labels" if isinstance(self.decoder, LABELLED) else ""
            raise bounds_error(
                f"required key is missing: the class names in the model's order{where}",
                hint="add the key; docs/reference/pipeline.md lists every key",
                path=("postprocess", "classes"),
            )
        if not self.classes and not labelled:
            raise ValueError("name at least one class")
        return self


class Pipeline(Frozen):
    version: Literal[1]
    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")]
    source: Source | None = None  # one camera, named after the pipeline
    sources: Annotated[dict[str, CameraSource], Field(max_length=MAX_CAMERAS)] | None = None  # several: camera name -> source
    batch: Batch = Batch()
    preprocess: Preprocess
    model: Model
    postprocess: Postprocess
    track: Track | None = None  # multi-object tracking after NMS (ByteTrack), one tracker per camera
    cascade: Cascade = ()  # models run on the crops of the detections, in order (sdk.spec.cascade)
    sinks: Annotated[tuple[Sink, ...], Field(max_length=16)] = Field(default_factory=lambda: (JsonlSink(kind="jsonl"),))
    budgets: Budgets = Budgets()
    calibration: Calibration | None = None
    service: Service = Service()
    health: Health = Health()
    evaluation: Evaluation = Evaluation()  # how `sdk evaluate` scores the model on labelled images (sdk.spec.evaluation)

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
        if isinstance(data, dict) and data.get("sinks") == []:  # decision 0967: said, not silently taken as the default
            raise bounds_error(
                "[] names no output; allowed: one sink or more",
                hint="to write nothing, `sinks: [{kind: null}]`: the service writes no file, and a measured run (deploy, validate) "
                "still writes detections.jsonl into its report folder, where the accuracy and determinism checks read it",
                path=("sinks",),
            )
        if isinstance(data, dict) and isinstance(data.get("sinks"), list):
            sinks = [dict(s, kind="null") if isinstance(s, dict) and "kind" in s and s["kind"] is None else s for s in data["sinks"]]
            data = {**data, "sinks": sinks}
        return data

    @model_validator(mode="before")
    @classmethod
    def _topics_are_cameras(cls, data: object) -> object:
        # `source: {uri: mcap://drive.mcap?topic=/front&topic=/rear}`: one camera per topic of the recording, named after
        # the topic (sdk.spec.cameras.topic_cameras), each with the block's replay and reconnect (decision 1020).
        if isinstance(data, dict) and isinstance(data.get("source"), dict) and "sources" not in data:
            cameras = topic_cameras(data["source"])
            if cameras is not None:
                data = {**{k: v for k, v in data.items() if k != "source"}, "sources": cameras}
        return data

    @model_validator(mode="after")
    def _one_kind_of_source(self) -> "Pipeline":
        hint = "give `source:` for one camera or `sources: {NAME: {uri: ...}, ...}` for several"
        if self.source is not None and self.sources is not None:
            raise bounds_error("both `source` and `sources` are given; allowed: exactly one of them", hint=hint, path=("sources",))
        if self.source is None and self.sources is None:
            raise bounds_error("neither `source` nor `sources` is given; allowed: exactly one of them", hint=hint, path=())
        if self.sources is not None:
            if not self.sources:
                raise bounds_error("{} names no camera; allowed: at least one camera", hint=hint, path=("sources",))
            for name in self.sources:
                if not CAMERA_NAME.match(str(name)):
                    raise bounds_error(f"camera name {shown(name)}: allowed: {CAMERA_NAME_RULE}", hint="rename the camera", path=("sources", name))
        for name in self.budgets.cameras:
            if name not in self.cameras:
                raise bounds_error(
                    f"{shown(name)} is not a camera of this pipeline; allowed: {', '.join(self.cameras)}",
                    hint="budgets.cameras is keyed by the names of `sources`",
                    path=("budgets", "cameras", name),
                )
        return self

    @property
    def cameras(self) -> dict[str, CameraSource]:
        """Every camera by name, in the file's order; `source:` is one camera named after the pipeline."""
        if self.sources is not None:
            return dict(self.sources)
        return {self.name: CameraSource(**dict(self.source))}

    @property
    def multi_camera(self) -> bool:
        return self.sources is not None

    @property
    def batch_size(self) -> int:
        """Frames per inference call the prepared model is made for: the camera count with `batch.size: cameras`, else 1."""
        return len(self.cameras) if self.batch.size == "cameras" else 1

    def prepared_inputs(self) -> dict[str, tuple[int, ...]] | None:
        """model.prepare.inputs with the batch dimension the cameras need: a first dimension written as 1
        becomes the camera count when the frames are batched (`batch.size: cameras`)."""
        if self.model.prepare is None:
            return None
        return {name: (self.batch_size, *shape[1:]) if shape and shape[0] == 1 else tuple(shape) for name, shape in self.model.prepare.inputs.items()}

    def preprocess_for(self, camera: str) -> Preprocess:
        """The preprocessing of one camera: the shared section with the camera's own crop, where it has one."""
        crop = self.cameras[camera].crop
        return self.preprocess if crop is None else self.preprocess.model_copy(update={"crop": crop})

    @model_validator(mode="after")
    def _rotation_inside_retention(self) -> "Pipeline":
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
    def _outputs_apart(self) -> "Pipeline":
        check_outputs(self.sinks, list(self.cameras) if self.multi_camera else [])
        return self

    @model_validator(mode="after")
    def _masks_need_a_segmenter(self) -> "Pipeline":
        for index, sink in enumerate(self.sinks):
            if isinstance(sink, MaskSink) and not isinstance(self.postprocess.decoder, SegmentDecoder):
                raise bounds_error(
                    f"a mask sink with decoder kind {self.postprocess.decoder.kind}; allowed: kind: mask only with postprocess.decoder.kind segment",
                    hint="remove the mask sink: this decoder makes no mask",
                    path=("sinks", index, "kind"),
                )
        return self

    @model_validator(mode="after")
    def _one_cuda_graph(self) -> "Pipeline":
        if not self.preprocess.cuda_graph:
            return self
        clash = "model.cuda_graph (the engine alone)" if self.model.cuda_graph else "model.profile_layers" if self.model.profile_layers else None
        if clash is not None:
            raise bounds_error(
                f"true together with {clash}; allowed: one of them (preprocess.cuda_graph already captures the engine's launches, "
                "and TensorRT's layer profiler needs un-captured launches)",
                hint="keep preprocess.cuda_graph (the whole frame) and drop the other",
                path=("preprocess", "cuda_graph"),
            )
        if self.multi_camera:
            raise bounds_error(
                f"true with {len(self.cameras)} cameras; allowed: true with one camera "
                "(the captured frame is one camera's; several cameras run their slots un-captured, decision 0460)",
                path=("preprocess", "cuda_graph"),
            )
        return self

    @model_validator(mode="after")
    def _int8_needs_calibration(self) -> "Pipeline":
        if self.model.precision == "int8" and self.calibration is None:
            raise ValueError("model.precision is int8 but there is no `calibration` section: INT8 ranges come from calibration frames")
        return self

    @model_validator(mode="after")
    def _prepared_input_matches_preprocess(self) -> "Pipeline":
        if self.model.prepare is not None:
            images = [name for name in self.model.prepare.inputs if name not in self.model.inputs]
            if len(images) != 1:
                raise ValueError(
                    f"model.prepare.inputs names {sorted(self.model.prepare.inputs)}: exactly one of them must be the image "
                    f"(the others constants named in model.inputs), got {len(images)} not in model.inputs"
                )
            name = images[0]
            shape = self.model.prepare.inputs[name]
            # The batch dimension is 1 (one frame a call) or the camera count (one frame of each camera).
            batches = sorted({1, len(self.cameras)})
            if tuple(shape[1:]) != self.preprocess.tensor_shape[1:] or not shape or shape[0] not in batches:
                raise ValueError(
                    f"model.prepare.inputs[{name!r}] is {list(shape)} but preprocess produces "
                    f"{list(self.preprocess.tensor_shape)} ({self.preprocess.layout}) with a batch of {' or '.join(map(str, batches))}"
                )
        return self

    @model_validator(mode="after")
    def _cascade_budgets_name_steps(self) -> "Pipeline":
        names = [step.name for step in self.cascade]
        if len(set(names)) != len(names):
            raise bounds_error(f"step names {names} repeat; allowed: a distinct name per step", path=("cascade",))
        for step in self.budgets.cascade:
            if step not in names:
                raise bounds_error(
                    f"{shown(step)} is not a cascade step; allowed: {', '.join(names) if names else 'none (the pipeline has no cascade)'}",
                    hint="budgets.cascade is keyed by the names of the steps in `cascade:`",
                    path=("budgets", "cascade", step),
                )
        return self

    @model_validator(mode="after")
    def _anchors_laid_on_the_network_input(self) -> "Pipeline":
        check_anchors_on_input(self.postprocess.decoder, self.preprocess.resize)
        return self

    @model_validator(mode="after")
    def _crop_inside_a_known_frame(self) -> "Pipeline":
        for name, camera in self.cameras.items():
            crop = camera.crop or self.preprocess.crop
            if crop is not None and camera.uri.startswith("synthetic://"):
                width, height = synthetic_size(camera.uri)
                problem = crop_outside(crop, width, height)
                if problem is not None:
                    key, message = problem
                    at = ("sources", name, "crop", key) if camera.crop is not None else ("preprocess", "crop", key)
                    raise bounds_error(message, hint=CROP_HINT, path=at)
        return self

    @model_validator(mode="after")
    def _held_frames_fit(self) -> "Pipeline":
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
    "AccuracyBudget",
    "AccuracyGate",
    "Batch",
    "Budgets",
    "CameraSource",
    "ClassifyDecoder",
    "Calibration",
    "Crop",
    "DegradedMode",
    "Determinism",
    "DlaPlacement",
    "EnvironmentRequirements",
    "Evaluation",
    "Frozen",
    "GeneratedAnchors",
    "JsonlSink",
    "LatencyLimits",
    "MaskSink",
    "FoxgloveSink",
    "McapSink",
    "Model",
    "NmsInsideDecoder",
    "Normalize",
    "NullSink",
    "Pipeline",
    "Pixels",
    "PositiveMs",
    "Prepare",
    "PythonDecoder",
    "Preprocess",
    "Reconnect",
    "Replay",
    "Resize",
    "Retention",
    "Rotate",
    "SegmentDecoder",
    "Service",
    "Sink",
    "Source",
    "SsdAnchorOptions",
    "SsdDecoder",
    "Track",
    "VideoSink",
    "YoloDecoder",
    "crop_outside",
    "synthetic_size",
]
