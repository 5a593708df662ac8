"""Activation statistics for INT8 calibration: the model runs once over the calibration frames.

The observed tensors are made graph outputs, handed over in ONNX Runtime's own blocked layout
where it has one (`tools.int8.blocked_outputs`: the order of the values does not matter here), and each
frame's are counted by a compiled kernel (`tools.int8.histogram_kernel`) while ONNX Runtime runs the
next frame: exact min and max, and for entropy and percentile a |x| histogram on a power-of-two
grid that stays exact when the range grows, so one pass gives what used to take two (ranges
first, then histograms over them) and the result does not depend on frame order. (ONNX Runtime's
own collectors histogram in numpy, 10x slower than FP32 inference, and need chunking to stay in
memory.)

Each observed tensor gains a reader, which costs ONNX Runtime its Conv+activation fusion there,
so tensors whose statistics follow from another's are not observed but derived
(`CalibrationPlan`): rearranged tensors (the same values), and a Conv/BatchNorm output read only by
a ReLU/Clip, which takes the activation's range. TensorRT and ONNX Runtime's Q/DQ quantizer fuse
such a pair, and on a symmetric grid that holds 0 and saturates at the activation's amax,
Q(act(x)) == act(Q(x)); measured on the example detector, the Q/DQ model's outputs are identical
either way (also with layers kept in float).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sdk.errors import ModelError
from tools.progress import Progress

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
    histograms: np.ndarray | None  # (observed, HISTOGRAM_BINS) int64 counts of |x|, bin i = [i, i+1) * bin_width
    bin_width: np.ndarray | None  # (observed,) a power of two each; 0 where the tensor is all zeros
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


def _session(model, threads: int | None, *, spinning: bool):
    import onnxruntime as ort

    from tools.int8.blocked_outputs import session_options

    return ort.InferenceSession(model.SerializeToString(), session_options(threads, spinning=spinning), providers=["CPUExecutionProvider"])


def activation_floor(node, initializers: dict[str, np.ndarray]) -> float | None:
    """The least value a ReLU or Clip can output, when it is known and not negative."""
    if node.op_type == "Relu":
        return 0.0
    if node.op_type != "Clip":
        return None
    if len(node.input) > 1 and node.input[1]:  # opset 11+: the bound is an input
        value = initializers.get(node.input[1])
        low = float(value) if value is not None and value.size == 1 else None
    else:
        low = next((a.f for a in node.attribute if a.name == "min"), None)  # opset 6
    return low if low is not None and low >= 0 else None


def _ranges_graph(model, tensors: tuple[CalibratedTensor, ...]) -> tuple[object, dict[int, float]]:
    """Min-max needs no histogram, and reductions inside the graph beat exporting the tensors.
    Outputs `calib__maximum` (every tensor) and `calib__minimum` (those without a floor); returns
    the graph and, for tensors a ReLU/Clip with a floor >= 0 writes, that floor, which stands for
    their minimum (the symmetric INT8 range needs only their maximum)."""
    from onnx import helper, numpy_helper

    graph = model.graph
    initializers = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    producers = {out: node for node in graph.node for out in node.output}
    graph.initializer.append(numpy_helper.from_array(np.array([-1], np.int64), "calib__flat"))
    floors: dict[int, float] = {}
    mins, maxs = [], []

    def reduce_to_one(op: str, source: str, out: str) -> None:
        # Reduced in place (no Reshape of a tensor other nodes read, which would copy it).
        graph.node.append(helper.make_node(op, [source], [f"{out}__scalar"], keepdims=0))
        graph.node.append(helper.make_node("Reshape", [f"{out}__scalar", "calib__flat"], [out]))

    for index, tensor in enumerate(tensors):
        node = f"calib__{index}"
        producer = producers.get(tensor.name)
        floor = activation_floor(producer, initializers) if producer is not None else None
        if floor is not None and len(tensor.shape) >= 3:
            # GlobalMaxPool runs on ONNX Runtime's blocked (NCHWc) layout where ReduceMax forces a
            # reorder copy: 1.5x FP32 inference against 2.3x on the example detector.
            floors[index] = floor
            graph.node.append(helper.make_node("GlobalMaxPool", [tensor.name], [f"{node}__channels"]))
            reduce_to_one("ReduceMax", f"{node}__channels", f"{node}__max")
        else:
            reduce_to_one("ReduceMin", tensor.name, f"{node}__min")
            reduce_to_one("ReduceMax", tensor.name, f"{node}__max")
            mins.append(f"{node}__min")
        maxs.append(f"{node}__max")
    graph.node.append(helper.make_node("Concat", maxs, ["calib__maximum"], axis=0))
    outputs = ["calib__maximum"]
    if mins:
        graph.node.append(helper.make_node("Concat", mins, ["calib__minimum"], axis=0))
        outputs.append("calib__minimum")
    _set_outputs(graph, outputs)
    return model, floors


def _activations_graph(model, tensors: tuple[CalibratedTensor, ...]):
    """The observed tensors leave the graph (the model's input is counted from the feed)."""
    inputs = {i.name for i in model.graph.input}
    _set_outputs(model.graph, [t.name for t in tensors if t.name not in inputs])
    return model


def _set_outputs(graph, names: list[str]) -> None:
    """Only these float tensors leave the graph (the model's own outputs are dropped)."""
    from onnx import TensorProto, helper

    del graph.output[:]
    graph.output.extend(helper.make_tensor_value_info(name, TensorProto.FLOAT, None) for name in names)


class CollectStatistics:
    """Settings in the constructor; calling it with preprocessed frames runs the model once over
    them and returns every observed tensor's min and max and (with `histograms`) |x| histogram."""

    def __init__(self, model_path: Path, *, histograms: bool, threads: int | None = None) -> None:
        """`threads`: for ONNX Runtime and for the counting each (default: the cores, split)."""
        self.model_path = Path(model_path)
        self.histograms = histograms
        self.threads = threads

    def __call__(self, frames: Iterable[np.ndarray], progress: Progress, *, count: int | None = None) -> ActivationStatistics:
        """`frames`: any iterable, consumed once; `count` (for the progress bar) defaults to its len()."""
        import onnx

        model = onnx.load(str(self.model_path))
        plan = calibration_plan(model)
        if not plan.observed:
            raise ModelError(f"{self.model_path}: the model has no float activation to calibrate")
        weights = {w.name for w in model.graph.initializer}
        inputs = [i.name for i in model.graph.input if i.name not in weights]
        if len(inputs) != 1:
            raise ModelError(f"{self.model_path}: calibration needs a model with one input, this one has {inputs}")
        total = count if count is not None else len(frames)
        task = progress.task("calibration: activation " + ("histograms" if self.histograms else "ranges"), total=total)
        collect = self._counted if self.histograms else self._reduced
        statistics = collect(model, plan, inputs[0], frames, task)
        task.done()
        return statistics

    def _reduced(self, model, plan: CalibrationPlan, input_name: str, frames: Iterable[np.ndarray], task) -> ActivationStatistics:
        tensors = plan.observed
        graph, floors = _ranges_graph(model, tensors)
        session = _session(graph, self.threads, spinning=False)  # host work: idle threads sleep (as in the counting pipeline below)
        reduced = [i for i in range(len(tensors)) if i not in floors]
        minimum = np.full(len(tensors), np.inf)
        maximum = np.full(len(tensors), -np.inf)
        seen = 0
        for frame in frames:
            seen += 1
            results = session.run(["calib__maximum", "calib__minimum"] if reduced else ["calib__maximum"], {input_name: frame})
            np.maximum(maximum, results[0], out=maximum)
            if reduced:
                minimum[reduced] = np.minimum(minimum[reduced], results[1])
            task.advance()
        for index, floor in floors.items():
            minimum[index] = floor
        broken = [t.name for t, lo, hi in zip(tensors, minimum, maximum, strict=True) if not (np.isfinite(lo) and np.isfinite(hi))]
        if broken:
            raise ModelError(
                f"calibration: {len(broken)} tensor(s) reach NaN or infinity on the calibration frames, first {broken[0]!r}",
                hint="check the preprocessing (scale, mean, std) against what the model was trained with",
            )
        return ActivationStatistics(plan, minimum, maximum, None, None, seen)

    def _counted(self, model, plan: CalibrationPlan, input_name: str, frames: Iterable[np.ndarray], task) -> ActivationStatistics:
        from tools.int8.blocked_outputs import blocked_session
        from tools.int8.histogram_kernel import ActivationCounter

        names = [t.name for t in plan.observed]
        rows = {name: row for row, name in enumerate(names)}
        shapes = {t.name: t.shape for t in plan.observed}
        # The cores are split between the model and the counting (a pipeline), not shared by both:
        # on a 2-vCPU VM, 1 + 1 threads took 11.7 s for a percentile calibration against 12.1 s for
        # 2 + 2 (medians of four alternating rounds).
        cores = len(os.sched_getaffinity(0))
        model_threads = self.threads or max(1, cores // 2)
        threads = self.threads or max(1, cores - model_threads)
        session = blocked_session(_activations_graph(model, plan.observed), shapes, threads=model_threads, spinning=False)
        output_rows = [rows[name] for name in session.tensors]
        seen = 0
        with ActivationCounter(names, threads=threads) as counter:
            for frame in frames:
                seen += 1
                work = list(zip(output_rows, session.run({input_name: frame}), strict=True))
                if input_name in rows:
                    work.append((rows[input_name], frame))
                counter.add(work)  # counted while the model runs on the next frame
                task.advance()
        return ActivationStatistics(plan, counter.minimum, counter.maximum, counter.counts, counter.bin_width, seen)
