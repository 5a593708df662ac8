"""`sdk calibrate PIPELINE`: INT8 ranges from one calibration run, as a Q/DQ model and TensorRT caches.

Frames are chosen deterministically (stride, seed), drawn from a recording and passed through the
very `CpuPreprocessor` the runtime uses, so calibration never sees other pixels than inference.
Statistics are collected inside the graph (`tools.int8.activation_stats`) and turned into ranges the
way TensorRT does (`tools.int8.range_methods`: entropy, min-max, percentile); ONNX Runtime's
`quantize_static` writes the Q/DQ model from them, the output tail in float (explicit INT8: TensorRT 11,
strongly typed networks; `tools.int8.output_tail`), and the same ranges become TensorRT
8.6/10 calibration caches (implicit INT8, the DLA route) for any target version. Cached by the hash of
(prepared model, calibration frames, method).

ModelOpt (`nvidia-modelopt[onnx]`) places Q/DQ the way TensorRT fuses best but pins onnxruntime-gpu,
torch and cupy, which clash with the CPU runtime here (see DESIGN.md); ONNX Runtime's quantizer is
the one that installs and runs on any host.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sdk.artifacts import ModelArtifacts
from sdk.engine.calibration_cache import CalibrationCache, elementwise_ties, fusion_ties, tie_ranges
from sdk.errors import ConfigError, ModelError
from sdk.release import sha256_of
from sdk.spec.loader import PipelineFile
from sdk.spec.schema import Calibration
from tools.cache import build_folder
from tools.int8.activation_stats import ActivationStatistics, CollectStatistics
from tools.int8.calibration_frames import (
    CameraClip,
    CameraSelection,
    camera_clips,
    count_clip_frames,
    iter_camera_frames,
    iter_clip_frames,
    select_camera_frames,
    source_uri,
    stratified,
)
from tools.int8.output_tail import WEIGHTED_OPS, bounded_outputs, output_tail
from tools.int8.qdq_opset import link_or_convert
from tools.int8.quantizer_fast_paths import fast_paths
from tools.int8.range_methods import entropy_amax, percentile_amax
from tools.models.prefetch import Prefetched
from tools.progress import Progress, SilentProgress

# 6: ranges.json records the ranges TensorRT fuses (pooling, concatenation), tied in its caches;
# 5: one pass, histograms on a power-of-two grid; 4: a Conv before ReLU/Clip takes its range;
# 3: in-graph statistics, TensorRT's entropy; 2: ONNX Runtime's
CALIBRATE_FORMAT = 9  # 7: ElementWise input ties for DLA builds in ranges.json; 8: models older than opset 13 quantized at 13
# 9: the output tail stays out of INT8 (ranges.json's output_tail), a Sigmoid/Softmax output's range is its max (decision 1125)
# The calibrator class the engine builder presents the cache through: its name is the cache header's.
# Percentile ranges go through the entropy calibrator's interface (DLA accepts only EntropyCalibration2).
TRT_ALGORITHM = {"entropy": "EntropyCalibration2", "minmax": "MinMaxCalibration", "percentile": "EntropyCalibration2"}


@dataclass(frozen=True)
class FrameSelection:
    calibration: tuple[int, ...]
    holdout: tuple[int, ...]


def select_frames(total: int, spec: Calibration) -> FrameSelection:
    """`frames` for calibration and `holdout_frames` for the accuracy gate, disjoint, from every
    `stride`-th frame, drawn with `seed`: the same settings always give the same frames."""
    candidates = list(range(spec.seed % spec.stride, total, spec.stride))
    need = spec.frames + spec.holdout_frames
    if total == 1:  # a still image: looping it repeats one frame, it adds none
        raise ConfigError(
            f"calibration: the source is a single still image; calibration needs {need} different frames ({spec.frames} calibration.frames "
            f"to fit on and {spec.holdout_frames} holdout_frames to judge on), and one image looped is still one frame",
            hint=f"give calibration.source a recording of at least {need} frames of the scenes the model will see "
            "(file://clip.mp4, or images://folder of images)",
        )
    if len(candidates) < need:
        raise ConfigError(
            f"calibration: frames ({spec.frames}) + holdout_frames ({spec.holdout_frames}) = {need} different frames needed; the source has "
            f"{total}, {len(candidates)} of them at stride {spec.stride} (a loop repeats frames, it adds none)",
            hint="lower calibration.frames, holdout_frames or stride, or give calibration.source a longer recording",
        )
    order = np.random.default_rng(spec.seed).permutation(len(candidates))
    calibration = tuple(sorted(candidates[i] for i in order[: spec.frames]))
    holdout = tuple(sorted(candidates[i] for i in order[spec.frames : need]))
    return FrameSelection(calibration, holdout)


def iter_preprocessed_frames(pipeline: PipelineFile, indices: set[int], input_shape: tuple[int, ...]) -> Iterator[tuple[int, np.ndarray]]:
    """The chosen frames in source order, through the runtime's own preprocessing (the one code path)."""
    yield from iter_clip_frames(pipeline, source_uri(pipeline), pipeline.spec.preprocess, indices, input_shape)


def preprocessed_frames(pipeline: PipelineFile, indices: set[int], input_shape: tuple[int, ...], progress: Progress) -> dict[int, np.ndarray]:
    """The chosen frames, read first and kept (the accuracy gate runs them through two models)."""
    task = progress.task("reading frames", total=len(indices))
    frames: dict[int, np.ndarray] = {}
    for index, frame in iter_preprocessed_frames(pipeline, indices, input_shape):
        frames[index] = frame
        task.advance()
    task.done()
    return frames


def count_frames(pipeline: PipelineFile) -> int:
    """Frames in the calibration source, corrupt ones included (they keep their index)."""
    return count_clip_frames(pipeline, CameraClip("source", source_uri(pipeline), pipeline.spec.preprocess))


ORT_METHODS = {  # lazily: onnxruntime.quantization is imported only when calibrating
    "entropy": lambda m: m.Entropy,
    "minmax": lambda m: m.MinMax,
    "percentile": lambda m: m.Percentile,
}


@dataclass(frozen=True)
class CalibrationArtifacts:
    folder: Path

    @property
    def qdq_model(self) -> Path:
        return self.folder / "model.qdq.onnx"

    @property
    def ranges(self) -> Path:
        return self.folder / "ranges.json"

    @property
    def onnxruntime_ranges(self) -> Path:
        return self.folder / "onnxruntime_ranges.json"

    def output_tail(self) -> list[str]:
        """The nodes every Q/DQ model of this calibration keeps out of INT8 (tools.int8.output_tail)."""
        return json.loads(self.ranges.read_text()).get("output_tail", [])

    def amax(self) -> dict[str, float]:
        return {name: entry["amax"] for name, entry in json.loads(self.ranges.read_text())["tensors"].items()}

    def trt_cache(self, tensorrt: str, dla: bool = False) -> str:
        """The TensorRT calibration cache: the ranges, with those TensorRT fuses tied (sdk/engine/calibration_cache.py);
        for a DLA build also each ElementWise layer's two inputs (NvInfer.h: equal ranges on DLA in INT8)."""
        data = json.loads(self.ranges.read_text())
        ties = [(anchor, tuple(tied)) for anchor, tied in (*data.get("ties", ()), *(data.get("dla_ties", ()) if dla else ()))]
        return CalibrationCache.from_amax(tie_ranges(self.amax(), ties), tensorrt, TRT_ALGORITHM[data["method"]]).render()


class Calibrate:
    """Settings in the constructor; calling it returns cached or fresh artifacts."""

    def __init__(self, pipeline: PipelineFile, model: ModelArtifacts, cache_root: Path, progress: Progress | None = None) -> None:
        if pipeline.spec.calibration is None:
            raise ConfigError(f"{pipeline.path}: no `calibration` section", hint="add one (see README.md) to calibrate for INT8")
        if pipeline.spec.batch_size > 1:  # tools.int8.for_deploy calibrates batched cameras on their one-frame-per-call preparation
            raise ConfigError(
                f"{pipeline.path}: calibration: Calibrate takes the model prepared for one frame per call, not a batch of "
                f"{pipeline.spec.batch_size} cameras",
                hint="calibrate through `sdk calibrate` (tools.int8.for_deploy.Int8ForDeploy), which prepares it",
            )
        self.pipeline = pipeline
        self.spec = pipeline.spec.calibration
        self.model = model
        self.cache_root = Path(cache_root)
        self.progress = progress or SilentProgress()
        self._selection: FrameSelection | CameraSelection | None = None

    @property
    def selection(self) -> FrameSelection | CameraSelection:
        """One camera: the seeded draw; several (`sources:`): every camera's share (tools.int8.calibration_frames)."""
        if self._selection is None:
            if stratified(self.pipeline):
                totals = {name: count_clip_frames(self.pipeline, clip) for name, clip in camera_clips(self.pipeline).items()}
                self._selection = select_camera_frames(totals, self.spec, f"{self.pipeline.path}: calibration")
            else:
                self._selection = select_frames(count_frames(self.pipeline), self.spec)
        return self._selection

    @property
    def key(self) -> str:
        if stratified(self.pipeline):
            clips = camera_clips(self.pipeline).values()
            uris = [(f"sources.{c.name}.uri", c.uri) for c in clips]
            preprocess = {c.name: c.preprocess.model_dump(mode="json") for c in clips}
            frames = {name: list(chosen) for name, chosen in self.selection.calibration.items()}
            holdout = {name: list(held) for name, held in self.selection.holdout.items()}
        else:
            uris = [("calibration.source", source_uri(self.pipeline))]
            preprocess, frames = self.pipeline.spec.preprocess.model_dump(mode="json"), self.selection.calibration
            holdout = list(self.selection.holdout)
        media = []
        for where, uri in uris:
            source = self.pipeline.resolve(uri.partition("://")[2], where)
            media += [source] if source.is_file() else sorted(p for p in source.iterdir() if p.is_file())
        settings = {
            "format": CALIBRATE_FORMAT,
            "model": sha256_of(self.model.model_path),
            "media": [sha256_of(p) for p in media],
            "preprocess": preprocess,
            "frames": frames,
            "holdout": holdout,  # recorded in ranges.json, and the gate (its verdict cached beside it) judges those frames
            "method": self.spec.method,
            "percentile": self.spec.percentile if self.spec.method == "percentile" else None,
        }
        return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:24]

    def __call__(self) -> CalibrationArtifacts:
        target = CalibrationArtifacts(self.cache_root / "calibration" / self.key)
        if target.ranges.is_file() and target.qdq_model.is_file():
            return target
        build_folder(target.folder, lambda folder: self._calibrate_into(CalibrationArtifacts(folder)))
        return target

    def _frames(self, input_shape: tuple[int, ...]):
        """(key, tensor) of the calibration frames; the keys are frame indices, or (camera, index) with several cameras."""
        chosen = self.selection.calibration
        if isinstance(self.selection, CameraSelection):
            return iter_camera_frames(self.pipeline, chosen, input_shape), sum(len(c) for c in chosen.values())
        return iter_preprocessed_frames(self.pipeline, set(chosen), input_shape), len(chosen)

    def _calibrate_into(self, out: CalibrationArtifacts) -> None:
        import onnx

        meta = json.loads(self.model.meta_path.read_text())
        ((_, input_shape),) = meta["inputs"].items()
        chosen, count = self._frames(tuple(input_shape))
        delivered = []

        def tensors(frames):
            for index, frame in frames:
                delivered.append(index)
                yield frame

        # Frames are decoded ahead while the model runs, and not kept.
        with Prefetched(chosen) as frames:
            collect = CollectStatistics(self.model.model_path, histograms=self.spec.method != "minmax")
            statistics = collect(tensors(frames), self.progress, count=count)
        if len(delivered) != count:
            raise ModelError(f"calibration: the source delivered {len(delivered)} of the {count} chosen frames")
        graph = onnx.load(str(self.model.model_path), load_external_data=False).graph
        tensors = chosen_ranges(statistics, self.spec.method, self.spec.percentile, bounded_outputs(graph))
        write_onnxruntime_ranges(tensors, self.spec.method, out.onnxruntime_ranges)
        task = self.progress.task("writing the Q/DQ model", total=None)
        tail = output_tail(graph)
        write_qdq(self.model.model_path, out.qdq_model, out.onnxruntime_ranges, self.spec.method, exclude=tail)
        task.done()
        ties = [[anchor, list(tied)] for anchor, tied in model_ties(self.model.model_path) if anchor in tensors]
        dla_ties = [[anchor, list(tied)] for anchor, tied in model_ties(self.model.model_path, dla=True) if anchor in tensors]
        selection = self.selection
        recorded = {"method": self.spec.method, "tensors": tensors, "ties": ties, "dla_ties": dla_ties, "output_tail": tail}
        if isinstance(selection, CameraSelection):  # frames and holdout per camera, and how many each camera gave
            recorded |= {
                "frames": {name: list(chosen) for name, chosen in selection.calibration.items()},
                "holdout": {name: list(held) for name, held in selection.holdout.items()},
                "cameras": selection.counts(),
            }
        else:
            recorded |= {"frames": list(selection.calibration), "holdout": list(selection.holdout)}
        out.ranges.write_text(json.dumps(recorded, indent=1, sort_keys=True) + "\n")


def model_ties(model: Path, dla: bool = False) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The ranges TensorRT fuses in this model (pooling input/output, concatenation inputs/output), or with `dla` the
    ranges DLA needs equal beyond those (each ElementWise layer's two inputs)."""
    import onnx

    graph = onnx.load(str(model), load_external_data=False).graph
    nodes = [(node.op_type, tuple(node.input), tuple(node.output)) for node in graph.node]
    return elementwise_ties(nodes) if dla else fusion_ties(nodes)


def chosen_ranges(statistics: ActivationStatistics, method: str, percentile: float, bounded: frozenset[str] = frozenset()) -> dict[str, dict]:
    """Per tensor: the observed min and max and the amax the method keeps (the INT8 scale is amax/127).
    Each observed row is searched once (derived tensors share their source's), on every core. `bounded`: tensors of
    a bounded activation (Sigmoid, Softmax), which keep their observed amax whatever the method (decision 1125)."""
    import os
    from concurrent.futures import ThreadPoolExecutor

    whole = {statistics.index_of(name) for name in bounded if name in statistics.plan.names}

    def kept_amax(row: int) -> float:
        amax = float(statistics.amax[row])
        if method == "minmax" or amax <= 0 or row in whole:
            return amax
        histogram, width = statistics.histograms[row], float(statistics.bin_width[row])
        return entropy_amax(histogram, width, amax) if method == "entropy" else percentile_amax(histogram, width, amax, percentile)

    rows = range(len(statistics.plan.observed))
    with ThreadPoolExecutor(len(os.sched_getaffinity(0))) as pool:  # the entropy search releases the GIL
        kept = list(pool.map(kept_amax, rows))
    tensors = {}
    for name in statistics.plan.names:
        row = statistics.index_of(name)
        tensors[name] = {"min": float(statistics.minimum[row]), "max": float(statistics.maximum[row]), "amax": kept[row]}
    return tensors


def write_onnxruntime_ranges(tensors: dict[str, dict[str, float]], method: str, path: Path) -> None:
    """The ranges in ONNX Runtime's calibration-cache format, which `quantize_static` reads back."""
    from onnxruntime.quantization import CalibrationMethod
    from onnxruntime.quantization.calibrate import TensorData, TensorsData, save_tensors_data

    data = {
        name: TensorData(lowest=np.array(-entry["amax"], np.float32), highest=np.array(entry["amax"], np.float32)) for name, entry in tensors.items()
    }
    save_tensors_data(TensorsData(ORT_METHODS[method](CalibrationMethod), data), path)


def write_qdq(
    model: Path,
    out: Path,
    ort_ranges: Path,
    method: str,
    *,
    exclude: list[str] = (),
    only: list[str] | None = None,
    weight_scales: dict[str, list[dict]] | None = None,
    weighted_inputs: bool = False,
) -> None:
    """The Q/DQ model from saved ranges (no calibration here). `exclude`: nodes kept out of INT8;
    `only`: quantize just these (sensitivity analysis). Each node reads its own Q/DQ pair, so a node
    kept in float reads the float tensor even where a neighbour quantizes it. `weight_scales`:
    `conv_weight_scales` of this model, for a caller writing many Q/DQ models of one model. `weighted_inputs`: Q/DQ on
    the inputs of weighted layers only (TensorRT's placement, tools.int8.output_tail.WEIGHTED_OPS), measured, not yet
    the SDK's (decision 1125); without it, ONNX Runtime's own (every tensor it can quantize).

    ONNX Runtime's quantizer writes its shape-inferred copy beside the model it is given (`<stem>-inferred.onnx`),
    reads it back and deletes it: two quantizations of one cached model at once (two deploys or calibrations on
    one host cache) would read and delete each other's copy. It is given a link to the model in a folder of this
    call's own, so its copy lands there and the cache folder is only ever read. Four of its slow loops run the fast way
    (tools.int8.quantizer_fast_paths: the same model, byte for byte)."""
    import tempfile

    import onnx
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    model = Path(model).resolve()
    private = tempfile.TemporaryDirectory(prefix=".qdq-", dir=Path(out).parent)
    with private, quiet_onnxruntime_quantization(), fast_paths(model):  # the same model, written faster
        own = Path(private.name) / model.name
        link_or_convert(model, own)
        quantize_static(
            str(own),
            str(out),
            None,  # the ranges come from the cache
            quant_format=QuantFormat.QDQ,
            per_channel=True,
            activation_type=QuantType.QInt8,  # symmetric signed INT8: what TensorRT executes
            weight_type=QuantType.QInt8,
            calibrate_method=ORT_METHODS[method](CalibrationMethod),  # must name the cache's method; ranges are read from it
            nodes_to_exclude=list(exclude),
            nodes_to_quantize=list(only) if only is not None else None,
            op_types_to_quantize=list(WEIGHTED_OPS) if weighted_inputs else None,
            extra_options={
                "ActivationSymmetric": True,
                "WeightSymmetric": True,
                "DedicatedQDQPair": bool(exclude or only),
                "TensorQuantOverrides": weight_scales if weight_scales is not None else conv_weight_scales(onnx.load(str(model))),
                **({"OpTypesToExcludeOutputQuantization": list(WEIGHTED_OPS)} if weighted_inputs else {}),
            },
            calibration_cache_path=str(ort_ranges),
        )


def conv_weight_scales(model) -> dict[str, list[dict]]:
    """Per-channel scales of every Conv weight, as ONNX Runtime's quantizer computes them for
    symmetric INT8 (scale = 2 * max|w| / 254 in float64, 1.0 for an all-zero channel; tested equal),
    handed to it as overrides: its own loop takes ~50 us a channel in Python, 1.4 s of the 2.7 s it
    needs for the example detector's 25,578 channels."""
    from onnx import numpy_helper

    weights = {i.name: i for i in model.graph.initializer}
    overrides: dict[str, list[dict]] = {}
    for node in model.graph.node:
        if node.op_type != "Conv" or len(node.input) < 2 or node.input[1] not in weights or node.input[1] in overrides:
            continue
        data = numpy_helper.to_array(weights[node.input[1]])
        if data.dtype != np.float32 or data.ndim < 2:
            continue
        absmax = np.abs(data.reshape(data.shape[0], -1)).max(axis=1).astype(np.float64)
        scales = 2.0 * absmax / 254.0  # (qmax - qmin) of symmetric INT8: 127 - (-127)
        scales[scales < np.finfo(np.float32).tiny] = 1.0
        channels = [{"scale": float(scale), "zero_point": 0} for scale in scales]
        channels[0]["axis"] = 0  # output channels; ONNX Runtime reads the axis from the first entry
        overrides[node.input[1]] = channels
    return overrides


@contextlib.contextmanager
def quiet_onnxruntime_quantization():
    """ONNX Runtime's quantizer prints progress and logs advice on the root logger; the CLI shows our own."""
    import io

    root = logging.getLogger()
    previous = root.level
    root.setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            yield
    finally:
        root.setLevel(previous)


def holdout_frames(
    pipeline: PipelineFile, model: ModelArtifacts, artifacts: CalibrationArtifacts, progress: Progress | None = None, limit: int | None = None
) -> dict:
    """The held-out frames recorded with the calibration, preprocessed: index -> tensor, or (camera, index) -> tensor
    with several cameras (every camera's first `limit` with a limit)."""
    progress = progress or SilentProgress()
    holdout = json.loads(artifacts.ranges.read_text())["holdout"]
    meta = json.loads(model.meta_path.read_text())
    ((_, input_shape),) = meta["inputs"].items()
    if not isinstance(holdout, dict):
        return preprocessed_frames(pipeline, set(holdout[:limit]), tuple(input_shape), progress)
    chosen = {name: tuple(held[:limit]) for name, held in holdout.items()}
    task = progress.task("reading frames", total=sum(len(c) for c in chosen.values()))
    frames = {}
    for key, frame in iter_camera_frames(pipeline, chosen, tuple(input_shape)):
        frames[key] = frame
        task.advance()
    task.done()
    return frames


def holdout_keys(artifacts: CalibrationArtifacts, limit: int | None = None) -> set:
    """The keys `holdout_frames(limit=...)` returns, without reading a frame: indices, or (camera, index) with several."""
    holdout = json.loads(artifacts.ranges.read_text())["holdout"]
    if not isinstance(holdout, dict):
        return set(holdout[:limit])
    return {(name, index) for name, held in holdout.items() for index in held[:limit]}


def check_accuracy(pipeline: PipelineFile, model: ModelArtifacts, artifacts: CalibrationArtifacts, progress: Progress | None = None):
    """Run the accuracy gate on the held-out frames recorded with the calibration; returns the report."""
    from tools.int8.accuracy import evaluate_int8

    progress = progress or SilentProgress()
    frames = holdout_frames(pipeline, model, artifacts, progress)
    return evaluate_int8(pipeline, model, artifacts.qdq_model, frames, pipeline.spec.calibration.accuracy, progress)
