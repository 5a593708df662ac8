"""When INT8 fails its accuracy gate: rank layers by what quantizing each costs, keep the worst in
higher precision until the gate passes.

Ranking: each weighted layer (Conv, Gemm, MatMul) is quantized ALONE (everything else float) and
the cosine loss of the outputs on a few held-out frames is its cost: the quantization error it adds
by itself, the number TensorRT users know from per-layer sensitivity sweeps.
Fallback: greedy in rank order, each candidate measured with the full gate and kept only if it
improves the worst output's cosine. Keeping layers in float is not monotonic: a layer kept in float
hands a float tensor to a quantized neighbour whose input range was calibrated for it, and on the
example detector keeping the 22 worst layers was worse than keeping the 2 worst (measured), so
blind top-k would mislead. The error often sits in an activation between two layers, which only
helps when both sides stay in float (measured: the detector's first depthwise convolution alone made
it worse, with the stem convolution that feeds it the gate passed), so a candidate that does not
help alone is tried once more together with its weighted neighbours. Written by hand: ONNX Runtime
and ModelOpt's CPU path offer no such search.
The Q/DQ model leaves kept layers without Q/DQ (each node reads its own Q/DQ pair, so a kept layer
reads the float tensor); the kept list is the per-layer precision list for TensorRT 10 (FP16 there).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from sdk.artifacts import ModelArtifacts
from sdk.backends.onnxruntime_cpu import session_options
from sdk.spec.loader import PipelineFile
from tools.int8.accuracy import AccuracyReport, evaluate_int8
from tools.int8.calibrate import CalibrationArtifacts, conv_weight_scales, holdout_frames, write_qdq
from tools.int8.output_tail import WEIGHTED_OPS
from tools.int8.probe_qdq import OneLayerProbes
from tools.progress import Progress, SilentProgress

RANKING_FRAMES = 8
MAX_TRIALS = 12
FALLBACK_SEARCH = 2  # 2: a candidate that does not help alone is tried with its neighbours (part of the judged cache key)
MIXED_FILE = "model.mixed.qdq.onnx"
PRECISION_FILE = "precision.json"


@dataclass(frozen=True)
class FallbackStep:
    layer: str
    together_with: tuple[str, ...]  # its neighbours, when it did not help alone
    isolated_cost: float
    cosine_before: float
    cosine_after: float
    kept: bool
    passed: bool


@dataclass
class MixedPrecision:
    qdq_model: Path
    fp16_layers: list[str]
    ranking: list[tuple[str, float]]  # (layer, cosine loss when quantized alone), worst first
    steps: list[FallbackStep]
    report: AccuracyReport  # the gate on the final model
    baseline_cosine: float

    @property
    def passed(self) -> bool:
        return self.report.passed

    def as_dict(self) -> dict:
        return {
            "fp16_layers": self.fp16_layers,
            "ranking": [{"layer": name, "cosine_loss": cost} for name, cost in self.ranking],
            "steps": [asdict(step) for step in self.steps],
            "baseline_cosine": self.baseline_cosine,
            "final": self.report.as_dict(),
            "passed": self.passed,
        }


def ranking_order(frames: dict) -> list:
    """Frame keys in order; with several cameras ((camera, index) keys) the cameras take turns, so the first few
    frames come from every camera."""
    return sorted(frames, key=lambda key: (key[1], key[0]) if isinstance(key, tuple) else (key, ""))


def worst_cosine(report: AccuracyReport) -> float:
    return min(stats["mean_cosine"] for stats in report.outputs.values())


def _cosines(session_outputs: list[list[np.ndarray]], reference: list[list[np.ndarray]]) -> float:
    """Worst output's mean cosine similarity over the frames."""
    worst = 1.0
    for k in range(len(reference[0])):
        values = []
        for ref, got in zip(reference, session_outputs, strict=True):
            a, b = ref[k].ravel().astype(np.float64), got[k].ravel().astype(np.float64)
            values.append(float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-12)))
        worst = min(worst, float(np.mean(values)))
    return worst


class FallbackToFp16:
    """Settings in the constructor; calling it searches and writes the mixed-precision model into `out`."""

    def __init__(
        self,
        pipeline: PipelineFile,
        model: ModelArtifacts,
        artifacts: CalibrationArtifacts,
        out: Path,
        progress: Progress | None = None,
        *,
        max_trials: int = MAX_TRIALS,
        ranking_frames: int = RANKING_FRAMES,
    ) -> None:
        self.pipeline, self.model, self.artifacts, self.out = pipeline, model, artifacts, Path(out)
        self.progress = progress or SilentProgress()
        self.max_trials, self.ranking_frames = max_trials, ranking_frames
        self.method = pipeline.spec.calibration.method
        self._weight_scales: dict[str, list[dict]] | None = None
        self._graph_nodes: list | None = None

    def layers(self) -> list[str]:
        import onnx

        graph = onnx.load(str(self.model.model_path), load_external_data=False).graph
        return [node.name for node in graph.node if node.op_type in WEIGHTED_OPS]

    def write_qdq(self, out: Path, **which) -> None:
        """`write_qdq` of the model, its Conv weight scales computed once for every Q/DQ model the search writes."""
        scales = self._all_weight_scales()
        if "only" not in which:  # every model the search judges keeps the calibration's output tail in float
            which["exclude"] = [*self.artifacts.output_tail(), *which.get("exclude", ())]
        else:  # a probe: only its layers' weight scales (ONNX Runtime checks every override it is given, 25,578 here)
            weights = {name for node in self._nodes() if node.name in which["only"] for name in node.input}
            scales = {name: channels for name, channels in scales.items() if name in weights}
        write_qdq(self.model.model_path, out, self.artifacts.onnxruntime_ranges, self.method, weight_scales=scales, **which)

    def _all_weight_scales(self) -> dict[str, list[dict]]:
        if self._weight_scales is None:
            import onnx

            self._weight_scales = conv_weight_scales(onnx.load(str(self.model.model_path)))
        return self._weight_scales

    def _nodes(self) -> list:
        if self._graph_nodes is None:
            import onnx

            self._graph_nodes = list(onnx.load(str(self.model.model_path), load_external_data=False).graph.node)
        return self._graph_nodes

    def neighbours(self) -> dict[str, list[str]]:
        """Each weighted layer's weighted producers and consumers, through the unweighted nodes
        (activations, reshapes) between them."""
        import onnx

        graph = onnx.load(str(self.model.model_path), load_external_data=False).graph
        producer = {out: node for node in graph.node for out in node.output}

        def upstream(node, seen) -> set[str]:
            found = set()
            for name in node.input:
                source = producer.get(name)
                if source is None or source.name in seen:
                    continue
                seen.add(source.name)
                found |= {source.name} if source.op_type in WEIGHTED_OPS else upstream(source, seen)
            return found

        adjacent: dict[str, set[str]] = {n.name: set() for n in graph.node if n.op_type in WEIGHTED_OPS}
        for node in graph.node:
            if node.op_type in WEIGHTED_OPS:
                for source in upstream(node, {node.name}):
                    adjacent[node.name].add(source)
                    adjacent[source].add(node.name)
        return {name: sorted(found) for name, found in adjacent.items()}

    def rank(self, frames: list[np.ndarray]) -> list[tuple[str, float]]:
        import onnxruntime as ort

        # Throwaway sessions on a busy host: idle intra-op threads sleep instead of spinning. Scheduling only,
        # the same kernels and partitions: outputs bit-identical, about half the CPU of 8 runs (measured).
        options = session_options(spinning=False)

        def run(model: Path | bytes) -> list[list[np.ndarray]]:
            session = ort.InferenceSession(model if isinstance(model, bytes) else str(model), options, providers=["CPUExecutionProvider"])
            name = session.get_inputs()[0].name
            return [session.run(None, {name: frame}) for frame in frames]

        reference = run(self.model.model_path)
        layers = self.layers()
        task = self.progress.task(f"sensitivity: each of {len(layers)} layers quantized alone", total=len(layers))
        costs = []
        probe = self.out / ".one-layer.onnx"
        probes = OneLayerProbes(self.model.model_path, self.artifacts.onnxruntime_ranges, self.method, self._all_weight_scales())
        for layer in layers:
            model = probes.probe_bytes(layer)  # the same bytes as write_qdq(only=[layer]), a third of its CPU
            if model is None:  # a layer the one-layer writer does not take: the whole way
                self.write_qdq(probe, only=[layer])
            costs.append((layer, round(1.0 - _cosines(run(probe if model is None else model), reference), 8)))
            task.advance(1)
        probe.unlink(missing_ok=True)
        task.done()
        return sorted(costs, key=lambda item: -item[1])

    def __call__(self, frames: dict | None = None, baseline: AccuracyReport | None = None) -> MixedPrecision:
        """`frames`: the calibration's held-out frames, `baseline`: the gate's report on its Q/DQ model, where the
        caller has them already (read and judged here otherwise)."""
        self.out.mkdir(parents=True, exist_ok=True)
        if frames is None:
            frames = holdout_frames(self.pipeline, self.model, self.artifacts, self.progress)
        gate = self.pipeline.spec.calibration.accuracy
        ranking = self.rank([frames[i] for i in ranking_order(frames)[: self.ranking_frames]])
        if baseline is None:
            baseline = evaluate_int8(self.pipeline, self.model, self.artifacts.qdq_model, frames, gate)
        best, kept, steps = baseline, [], []
        trial_path, final = self.out / ".trial.onnx", self.out / MIXED_FILE
        task = self.progress.task("keeping the worst layers in higher precision", total=self.max_trials)
        neighbours = self.neighbours()
        trials = 0
        for layer, cost in ranking:
            if best.passed or trials >= self.max_trials:
                break
            if layer in kept:
                continue
            candidates = [()]
            extra = tuple(n for n in neighbours.get(layer, []) if n not in kept)
            if extra:
                candidates.append(extra)
            for together in candidates:
                if trials >= self.max_trials:
                    break
                trials += 1
                self.write_qdq(trial_path, exclude=[*kept, layer, *together])
                trial = evaluate_int8(self.pipeline, self.model, trial_path, frames, gate)
                better = worst_cosine(trial) > worst_cosine(best)
                steps.append(FallbackStep(layer, together, cost, worst_cosine(best), worst_cosine(trial), better, trial.passed))
                task.advance(1)
                if better:
                    kept.extend([layer, *together])
                    best = trial
                    trial_path.replace(final)
                    break
        task.done()
        trial_path.unlink(missing_ok=True)
        if not kept:
            self.write_qdq(final)
        result = MixedPrecision(final, kept, ranking, steps, best, worst_cosine(baseline))
        (self.out / PRECISION_FILE).write_text(json.dumps(result.as_dict(), indent=1, default=str) + "\n")
        return result


@dataclass
class ActivationSample:
    layer: str
    values: np.ndarray = field(repr=False)
    amax: float | None


def activation_samples(model: ModelArtifacts, artifacts: CalibrationArtifacts, layers: list[str], frames: list[np.ndarray]) -> list[ActivationSample]:
    """The FP32 activations at these layers' outputs on these frames, with the calibrated amax of each."""
    import onnx
    import onnxruntime as ort

    proto = onnx.load(str(model.model_path))
    outputs = {node.name: node.output[0] for node in proto.graph.node if node.name in layers}
    existing = {o.name for o in proto.graph.output}
    for tensor in outputs.values():
        if tensor not in existing:
            proto.graph.output.append(onnx.ValueInfoProto(name=tensor))
    session = ort.InferenceSession(proto.SerializeToString(), session_options(spinning=False), providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    wanted = list(outputs.values())
    collected = {tensor: [] for tensor in wanted}
    for frame in frames:
        for tensor, value in zip(wanted, session.run(wanted, {name: frame}), strict=True):
            collected[tensor].append(value.ravel())
    amax = artifacts.amax()
    return [ActivationSample(layer, np.concatenate(collected[outputs[layer]]), amax.get(outputs[layer])) for layer in layers if layer in outputs]


def plot_sensitivity(result: MixedPrecision, samples: list[ActivationSample], path: Path) -> None:
    """sensitivity.png: the ranking, and the activation histograms of the worst layers against their INT8 range."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure = plt.figure(figsize=(12, 7))
    top = result.ranking[:12]
    axis = figure.add_subplot(2, 1, 1)
    colours = ["tab:red" if name in result.fp16_layers else "tab:blue" for name, _ in top]
    axis.barh([name.split("/")[-2] if "/" in name else name for name, _ in top][::-1], [cost for _, cost in top][::-1], color=colours[::-1])
    axis.set(xlabel="output cosine loss with only this layer in INT8", title="layer sensitivity (red: kept in higher precision)")
    for k, sample in enumerate(samples[:4]):
        axis = figure.add_subplot(2, 4, 5 + k)
        counts, edges = np.histogram(sample.values, bins=120)  # millions of values: 120 steps, not 120 bar patches
        axis.stairs(counts, edges, fill=True, color="tab:gray")
        axis.set_yscale("log")
        if sample.amax:
            for edge in (-sample.amax, sample.amax):
                axis.axvline(edge, color="tab:red", lw=1)
        axis.set_title(sample.layer.split("/")[-2] if "/" in sample.layer else sample.layer, fontsize=8)
        axis.tick_params(labelsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
