"""Activation statistics for INT8 calibration, collected inside the graph by ONNX Runtime.

Why not ONNX Runtime's own collectors: they make every activation a graph output (25 M floats a
frame for the example detector, copied to numpy) and histogram them in Python; that ran 10x slower
than FP32 inference and needed chunking to stay in memory. Here the reductions run in the graph and
only small tensors leave it:

- pass 1 (every method): ReduceMin/ReduceMax of each tensor, exact;
- pass 2 (entropy, percentile): a 2048-bin histogram of |x| over [0, amax] from pass 1, every
  element counted. The graph turns each element into its global bin index (tensor * 2048 + bin,
  int32) and one `np.bincount` counts every tensor at once. Two passes make the result independent
  of frame order, as TensorRT's calibrator is.

Each observed tensor gains a reader, which costs ONNX Runtime its Conv+activation fusion and its
blocked (NCHWc) layout there, so tensors whose statistics follow from another's are not observed but
derived (`CalibrationPlan`): rearranged tensors (the same values), and a Conv/BatchNorm output read
only by a ReLU/Clip, which takes the activation's range. TensorRT and ONNX Runtime's Q/DQ quantizer
fuse such a pair, and on a symmetric grid that holds 0 and saturates at the activation's amax,
Q(act(x)) == act(Q(x)); measured on the example detector, the Q/DQ model's outputs are identical
either way (also with layers kept in float).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sdk.errors import ModelError
from tools.progress import Progress
from tools.range_methods import HISTOGRAM_BINS

# Outputs that hold exactly their input's values, rearranged: same min, max and histogram.
REARRANGING_OPS = frozenset({"Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze", "Identity"})
# Producers fused with a following activation; they take the activation's range (module docstring).
FUSING_PRODUCERS = frozenset({"Conv", "ConvTranspose", "BatchNormalization"})
FUSED_ACTIVATIONS = frozenset({"Relu", "Clip"})


@dataclass(frozen=True)
class CalibratedTensor:
    name: str
    shape: tuple[int, ...]

    @property
    def elements(self) -> int:  # per frame
        return math.prod(self.shape)


@dataclass(frozen=True)
class CalibrationPlan:
    observed: tuple[CalibratedTensor, ...]
    derived: dict[str, str]  # tensor -> the observed tensor whose statistics it takes

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(sorted([*(t.name for t in self.observed), *self.derived]))


@dataclass(frozen=True)
class ActivationStatistics:
    plan: CalibrationPlan
    minimum: np.ndarray  # (observed,) float64
    maximum: np.ndarray
    histograms: np.ndarray | None  # (observed, 2048) int64 counts of |x| over [0, amax]
    frames: int

    @property
    def amax(self) -> np.ndarray:
        return np.maximum(np.abs(self.minimum), np.abs(self.maximum))

    def index_of(self, name: str) -> int:
        """Row of a tensor's statistics (a derived tensor reads its source's row)."""
        source = self.plan.derived.get(name, name)
        return [t.name for t in self.plan.observed].index(source)


def calibration_plan(model) -> CalibrationPlan:
    """Every float activation a node reads or writes (not weights): the tensors ONNX Runtime's
    quantizer looks up ranges for and TensorRT's calibration cache lists. Static shapes only."""
    import onnx

    graph = onnx.shape_inference.infer_shapes(model).graph
    infos = {v.name: v for v in [*graph.value_info, *graph.output, *graph.input]}
    weights = {i.name for i in graph.initializer}
    floats = (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16)
    shapes: dict[str, tuple[int, ...]] = {}
    for node in graph.node:
        for name in [*node.input, *node.output]:
            if not name or name in shapes or name in weights or name not in infos:
                continue
            tensor_type = infos[name].type.tensor_type
            if tensor_type.elem_type not in floats:
                continue
            dims = [d.dim_value if d.HasField("dim_value") else 0 for d in tensor_type.shape.dim]
            if any(d <= 0 for d in dims):
                raise ModelError(f"calibration: tensor {name!r} has no static shape ({dims}); prepare the model with static input shapes")
            shapes[name] = tuple(dims)

    readers: dict[str, list] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    outputs = {o.name for o in graph.output}
    source: dict[str, str] = {}
    for node in graph.node:
        if not node.output or node.output[0] not in shapes:
            continue
        out = node.output[0]
        if node.op_type in REARRANGING_OPS and node.input[0] in shapes:
            source[out] = node.input[0]
        consumers = readers.get(out, [])
        if node.op_type in FUSING_PRODUCERS and out not in outputs and len(consumers) == 1 and consumers[0].op_type in FUSED_ACTIVATIONS:
            source[out] = consumers[0].output[0]

    def root(name: str) -> str:
        seen = set()
        while name in source and name not in seen:
            seen.add(name)
            name = source[name]
        return name

    derived = {name: root(name) for name in source if root(name) != name}
    observed = tuple(CalibratedTensor(n, shapes[n]) for n in sorted(shapes) if n not in derived)
    return CalibrationPlan(observed, derived)


def _session(model, threads: int | None):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    if threads:
        options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def _ranges_graph(model, tensors: tuple[CalibratedTensor, ...]):
    from onnx import helper, numpy_helper

    graph = model.graph
    graph.initializer.append(numpy_helper.from_array(np.array([-1], np.int64), "calib__flat"))
    mins, maxs = [], []
    for index, tensor in enumerate(tensors):
        # Reduced in place: a Reshape of a tensor that other nodes also read would copy it.
        for op, out in (("ReduceMin", f"calib__{index}__min"), ("ReduceMax", f"calib__{index}__max")):
            graph.node.append(helper.make_node(op, [tensor.name], [f"{out}__scalar"], keepdims=0))
            graph.node.append(helper.make_node("Reshape", [f"{out}__scalar", "calib__flat"], [out]))
        mins.append(f"calib__{index}__min")
        maxs.append(f"calib__{index}__max")
    graph.node.append(helper.make_node("Concat", mins, ["calib__minimum"], axis=0))
    graph.node.append(helper.make_node("Concat", maxs, ["calib__maximum"], axis=0))
    _set_outputs(graph, ["calib__minimum", "calib__maximum"], "float32", len(tensors))
    return model


def _histogram_graph(model, tensors: tuple[CalibratedTensor, ...], minimum: np.ndarray, amax: np.ndarray):
    from onnx import TensorProto, helper, numpy_helper

    graph = model.graph
    constants = {
        "calib__flat": np.array([-1], np.int64),
        "calib__last_bin": np.array(HISTOGRAM_BINS - 1, np.int32),
    }
    for name, value in constants.items():
        graph.initializer.append(numpy_helper.from_array(value, name))
    pieces = []
    for index, tensor in enumerate(tensors):
        if amax[index] <= 0:
            continue  # all zeros: no histogram, the range is 0
        node = f"calib__{index}"
        source = tensor.name
        graph.initializer.append(numpy_helper.from_array(np.array(HISTOGRAM_BINS / float(amax[index]), np.float32), f"{node}__per_bin"))
        graph.initializer.append(numpy_helper.from_array(np.array(index * HISTOGRAM_BINS, np.int32), f"{node}__offset"))
        if minimum[index] < 0:  # most activations are ReLU/Clip outputs: already |x|
            graph.node.append(helper.make_node("Abs", [source], [f"{node}__abs"]))
            source = f"{node}__abs"
        graph.node.append(helper.make_node("Mul", [source, f"{node}__per_bin"], [f"{node}__scaled"]))
        graph.node.append(helper.make_node("Cast", [f"{node}__scaled"], [f"{node}__bin"], to=TensorProto.INT32))  # truncation: floor for |x|
        graph.node.append(helper.make_node("Min", [f"{node}__bin", "calib__last_bin"], [f"{node}__clamped"]))  # |x| == amax
        graph.node.append(helper.make_node("Add", [f"{node}__clamped", f"{node}__offset"], [f"{node}__global"]))
        graph.node.append(helper.make_node("Reshape", [f"{node}__global", "calib__flat"], [f"{node}__flat"]))  # sole reader: in place
        pieces.append(f"{node}__flat")
    graph.node.append(helper.make_node("Concat", pieces, ["calib__bins"], axis=0))
    _set_outputs(graph, ["calib__bins"], "int32", None)
    return model


def _set_outputs(graph, names: list[str], dtype: str, length: int | None) -> None:
    """Only the statistics leave the graph (the model's own outputs are dropped)."""
    from onnx import helper

    del graph.output[:]
    elem_type = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    for name in names:
        graph.output.append(helper.make_tensor_value_info(name, elem_type, [length] if length is not None else None))


class CollectStatistics:
    """Settings in the constructor; calling it with preprocessed frames runs the passes."""

    def __init__(self, model_path: Path, *, histograms: bool, threads: int | None = None) -> None:
        self.model_path = Path(model_path)
        self.histograms = histograms
        self.threads = threads

    def __call__(self, frames: list[np.ndarray], progress: Progress) -> ActivationStatistics:
        import onnx

        model = onnx.load(str(self.model_path))
        plan = calibration_plan(model)
        tensors = plan.observed
        if not tensors:
            raise ModelError(f"{self.model_path}: the model has no float activation to calibrate")
        weights = {w.name for w in model.graph.initializer}
        inputs = [i.name for i in model.graph.input if i.name not in weights]
        if len(inputs) != 1:
            raise ModelError(f"{self.model_path}: calibration needs a model with one input, this one has {inputs}")
        input_name = inputs[0]
        passes = 2 if self.histograms else 1
        task = progress.task(f"calibration pass 1 of {passes}: ranges", total=len(frames))
        session = _session(_ranges_graph(onnx.load(str(self.model_path)), tensors), self.threads)
        minimum = np.full(len(tensors), np.inf)
        maximum = np.full(len(tensors), -np.inf)
        for frame in frames:
            low, high = session.run(["calib__minimum", "calib__maximum"], {input_name: frame})
            np.minimum(minimum, low, out=minimum)
            np.maximum(maximum, high, out=maximum)
            task.advance()
        task.done()
        del session
        broken = [t.name for t, lo, hi in zip(tensors, minimum, maximum, strict=True) if not (np.isfinite(lo) and np.isfinite(hi))]
        if broken:
            raise ModelError(
                f"calibration: {len(broken)} tensor(s) reach NaN or infinity on the calibration frames, first {broken[0]!r}",
                hint="check the preprocessing (scale, mean, std) against what the model was trained with",
            )
        histograms = None
        amax = np.maximum(np.abs(minimum), np.abs(maximum))
        if self.histograms and np.any(amax > 0):
            task = progress.task(f"calibration pass 2 of {passes}: histograms", total=len(frames))
            session = _session(_histogram_graph(onnx.load(str(self.model_path)), plan.observed, minimum, amax), self.threads)
            counts = np.zeros(len(tensors) * HISTOGRAM_BINS, np.int64)
            for frame in frames:
                (bins,) = session.run(["calib__bins"], {input_name: frame})
                counts += np.bincount(bins, minlength=counts.size)
                task.advance()
            task.done()
            histograms = counts.reshape(len(tensors), HISTOGRAM_BINS)
        return ActivationStatistics(plan, minimum, maximum, histograms, len(frames))
