"""The frozen build plan: every decision about an engine, made in plain Python before TensorRT is touched.

The device-side adapter (`trt_adapter`) only maps this plan onto the builder API of the TensorRT
that is installed; the host hashes it into the engine cache key. Per-layer precision and device are
predictions (from the DLA analysis); TensorRT's builder makes the final choice and the device build
checks the placement contract against TensorRT's answers.

INT8 comes from one of two artifacts (see tools/int8/calibrate.py): TensorRT 8.6 and 10.x take implicit
INT8 through a calibration cache presented by an EntropyCalibration2 calibrator (the only INT8 route
onto DLA); TensorRT 11 removed calibrators and the INT8/FP16 builder flags, so it builds the Q/DQ
model as a strongly typed network.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import asdict, dataclass

from sdk.engine.platforms import TensorRTVersion
from sdk.errors import EngineBuildError

DEFAULT_WORKSPACE_BYTES = 1 << 30
# DLA_MANAGED_SRAM pool: TensorRT's default is 1 MiB; DLA on Orin has 1 MiB of SRAM per core.
DEFAULT_DLA_SRAM_BYTES = 1 << 20
# Layer kinds with INT8 kernels (GPU and DLA); others run FP16 (implicit) or stay FP32 (strongly typed).
INT8_LAYERS = {"Convolution", "Deconvolution", "Pooling", "Activation", "ElementWise", "Scale", "Concatenation", "Shuffle", "Resize"}
PLAN_FORMAT = 1
CALIBRATORS = ("EntropyCalibration2", "MinMaxCalibration")


@dataclass(frozen=True)
class LayerPlan:
    name: str
    layer: str  # TensorRT layer kind ("" when unknown)
    device: str  # "GPU" or "DLA" (predicted)
    precision: str  # "int8", "fp16", "fp32" (predicted)


@dataclass(frozen=True)
class Profile:
    tensor: str
    minimum: tuple[int, ...]
    optimum: tuple[int, ...]
    maximum: tuple[int, ...]


@dataclass(frozen=True)
class BuildPlan:
    tensorrt: str
    precision: str  # the network's: "int8", "fp16" or "fp32"
    int8_source: str | None  # "calibration_cache" (8.6, 10.x) or "qdq" (11.x)
    calibrator: str | None  # the cache's algorithm: the calibrator class that presents it (TensorRT checks they agree)
    strongly_typed: bool
    fp16_fallback: bool  # implicit INT8 also allows FP16 for layers without INT8 kernels
    device: str  # "GPU" or "DLA": the default device type
    dla_core: int | None
    gpu_fallback: bool
    workspace_bytes: int
    dla_sram_bytes: int | None
    timing_cache: bool
    profiles: tuple[Profile, ...]
    layers: tuple[LayerPlan, ...] = ()
    # Layers the host's accuracy fallback kept out of INT8 (precision.json): FP16 constraints for an
    # implicit-INT8 build; in a Q/DQ model they simply have no Q/DQ.
    higher_precision: tuple[str, ...] = ()
    format: int = PLAN_FORMAT
    batch_note: str | None = None  # several cameras: how the batch was set (a description; the shapes are in `profiles`)
    # Layers whose weights `sdk optimize` made 2:4 sparse: TensorRT's sparse-weights flag is set for the build (it then
    # picks sparse tactics where they win; DLA takes them in INT8 with more than 64 input channels).
    sparse_weights: tuple[str, ...] = ()

    @property
    def series(self) -> str:
        return TensorRTVersion.parse(self.tensorrt).series

    def precision_mix(self) -> dict[str, int]:
        return dict(sorted(Counter(layer.precision for layer in self.layers).items()))

    def device_mix(self) -> dict[str, int]:
        return dict(sorted(Counter(layer.device for layer in self.layers).items()))

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> BuildPlan:
        """The plan as the host wrote it (plan.json travels to the device with the model)."""
        if data.get("format") != PLAN_FORMAT:
            raise EngineBuildError(f"build plan format {data.get('format')!r}, this SDK reads {PLAN_FORMAT}", hint="plan and build with one SDK")
        profiles = tuple(Profile(p["tensor"], *(tuple(p[k]) for k in ("minimum", "optimum", "maximum"))) for p in data["profiles"])
        layers = tuple(LayerPlan(**layer) for layer in data.get("layers", ()))
        extra = {"higher_precision": tuple(data.get("higher_precision", ())), "sparse_weights": tuple(data.get("sparse_weights", ()))}
        return cls(**{**data, "profiles": profiles, "layers": layers, **extra})

    def digest(self) -> str:
        """The build settings, without the predictions (TensorRT decides those) and without the TensorRT
        version (the engine cache keys on it as a field of its own, so a miss can name it)."""
        settings = {k: v for k, v in self.as_dict().items() if k not in ("layers", "tensorrt", "batch_note")}
        if not settings["sparse_weights"]:  # dense builds keep the keys they always had
            del settings["sparse_weights"]
        return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()


def plan_build(
    tensorrt: TensorRTVersion,
    input_shapes: dict[str, tuple[int, ...]],
    precision: str = "int8",
    dla=None,  # the pipeline's DlaPlacement, or None for a GPU engine
    dla_cores: int = 0,
    predicted: tuple[tuple[str, str, str], ...] = (),  # (layer name, TensorRT layer kind, device) from the analysis
    workspace_bytes: int = DEFAULT_WORKSPACE_BYTES,
    dla_sram_bytes: int = DEFAULT_DLA_SRAM_BYTES,
    timing_cache: bool = True,
    calibrator: str = "EntropyCalibration2",  # the calibration cache header's algorithm (tools/int8/calibrate.py)
    higher_precision: tuple[str, ...] = (),  # layers kept out of INT8 by the accuracy fallback
    cameras: int = 1,  # the pipeline's camera count: the batch a dynamic first dimension is built for
    sparse_weights: tuple[str, ...] = (),  # layers made 2:4 sparse by `sdk optimize` (the model's sdk.optimize metadata)
) -> BuildPlan:
    if precision not in ("int8", "fp16", "fp32"):
        raise EngineBuildError(f"unknown precision {precision!r}", hint="int8, fp16 or fp32")
    series = tensorrt.series
    explicit = series == "11"
    int8_source = None if precision != "int8" else ("qdq" if explicit else "calibration_cache")
    if explicit and precision == "fp16":
        # No FP16 flag in TensorRT 11: a strongly typed network runs in the types of its tensors.
        raise EngineBuildError("TensorRT 11 builds strongly typed networks: FP16 needs an FP16 model", hint="build INT8 (Q/DQ) or FP32")
    on_dla = dla is not None
    if calibrator not in CALIBRATORS:
        raise EngineBuildError(f"unknown calibrator {calibrator!r}", hint=f"one of {', '.join(CALIBRATORS)}")
    if on_dla and int8_source == "calibration_cache" and calibrator != "EntropyCalibration2":
        raise EngineBuildError(
            f"DLA takes INT8 only from EntropyCalibration2, the calibration is {calibrator}", hint="calibrate with method: entropy or percentile"
        )
    if on_dla:
        if precision == "fp32":
            raise EngineBuildError("DLA runs FP16 or INT8 only, the plan asks FP32", hint="build int8 or fp16, or remove model.dla")
        if dla.core >= dla_cores:
            raise EngineBuildError(
                f"model.dla.core {dla.core}: TensorRT {tensorrt} on this platform offers {dla_cores} DLA cores",
                hint="see `sdk dla-report` for why, or remove model.dla to build for the GPU",
            )
    kept = set(higher_precision) if precision == "int8" else set()
    layers = tuple(
        LayerPlan(
            name,
            kind,
            device if on_dla else "GPU",
            ("fp32" if explicit else "fp16") if name in kept else _layer_precision(kind, device if on_dla else "GPU", precision, explicit),
        )
        for name, kind, device in predicted
    )
    profiles, batch_note = batch_profiles(input_shapes, cameras, on_dla)
    return BuildPlan(
        tensorrt=str(tensorrt),
        precision=precision,
        int8_source=int8_source,
        calibrator=calibrator if int8_source == "calibration_cache" else None,
        strongly_typed=explicit,
        fp16_fallback=precision == "int8" and not explicit,
        device="DLA" if on_dla else "GPU",
        dla_core=dla.core if on_dla else None,
        gpu_fallback=(dla.gpu_fallback == "allowed") if on_dla else False,
        workspace_bytes=workspace_bytes,
        dla_sram_bytes=dla_sram_bytes if on_dla else None,
        timing_cache=timing_cache,
        profiles=profiles,
        layers=layers,
        higher_precision=tuple(sorted(kept)),
        batch_note=batch_note,
        sparse_weights=tuple(sorted(sparse_weights)),
    )


def batch_profiles(input_shapes: dict[str, tuple[int, ...]], cameras: int, on_dla: bool) -> tuple[tuple[Profile, ...], str | None]:
    """The optimisation profile of each input (min, opt, max) and what the camera count made of the batch.

    A static shape is its own profile (min = opt = max). A dynamic first dimension (0 or -1 in the
    model) is the batch: min 1 (a batch with one camera's frame), opt = max = the camera count (every
    camera delivered in time). DLA engines take no dynamic dimension: a dynamic batch there is refused,
    and a static batch is said to be fixed to the camera count."""
    profiles, notes = [], []
    for name, shape in sorted(input_shapes.items()):
        shape = tuple(int(d) for d in shape)
        if any(d <= 0 for d in shape[1:]):
            raise EngineBuildError(
                f"input {name} {list(shape)}: only the first (batch) dimension may be dynamic", hint="prepare the model with static shapes"
            )
        if shape and shape[0] <= 0:
            if on_dla:
                raise EngineBuildError(
                    f"input {name} {list(shape)} has a dynamic batch; DLA engines need a static batch",
                    hint=f"prepare the model with a batch of {cameras} (model.prepare.inputs, batch.size: cameras)",
                )
            rest = shape[1:]
            profiles.append(Profile(name, (1, *rest), (cameras, *rest), (cameras, *rest)))
            notes.append(f"{name}: dynamic batch, profile min 1, opt and max {cameras} (the camera count)")
        else:
            profiles.append(Profile(name, shape, shape, shape))
            if cameras > 1:
                kind = "DLA needs a static batch: " if on_dla else ""
                what = f"one frame of each of the {cameras} cameras per call" if shape[0] == cameras else "the cameras' frames one after another"
                notes.append(f"{kind}{name}: static batch {shape[0]} ({what})")
    return tuple(profiles), ("; ".join(notes) or None)


def _layer_precision(kind: str, device: str, precision: str, explicit: bool) -> str:
    if precision != "int8":
        return precision
    if kind in INT8_LAYERS:
        return "int8"
    if explicit:
        return "fp32"  # strongly typed: a layer without Q/DQ keeps the tensor's type
    return "fp16"  # implicit INT8 with FP16 allowed; DLA has no FP32 at all
