"""The INT8 accuracy gate: FP32 and INT8 (the Q/DQ model, run by ONNX Runtime on CPU) on frames
held out from calibration, compared per output tensor and per detection."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from sdk.artifacts import ModelArtifacts
from sdk.backends.onnxruntime_cpu import OnnxRuntimeBackend
from sdk.postprocess import create_postprocessor
from sdk.spec.loader import PipelineFile
from sdk.spec.schema import AccuracyGate
from tools.progress import Progress, SilentProgress

MATCH_IOU = 0.5


@dataclass(frozen=True)
class AccuracyReport:
    frames: int
    outputs: dict[str, dict[str, float]]  # tensor -> cosine (worst frame), mean cosine, max abs error
    fp32_detections: int
    int8_detections: int
    recall: float
    precision: float
    mean_iou: float
    mean_score_drift: float
    failures: list[str]
    score_pairs: list[tuple[float, float]] = field(default_factory=list)  # (FP32, INT8) score of each matched detection
    frame_cosines: dict[str, list[float]] = field(default_factory=dict)  # output -> cosine per held-out frame
    # Several cameras: each camera's own fields (frames ... failures, passed); empty with one camera.
    cameras: dict[str, dict] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return not self.failures

    def as_dict(self) -> dict:
        out = {**asdict(self), "passed": self.passed}
        if not self.cameras:  # one camera: the report as it always was
            out.pop("cameras")
        return out


def _iou(a: np.ndarray, b: np.ndarray) -> float:
    x1, y1 = max(a[0], b[0]), max(a[1], b[1])
    x2, y2 = min(a[2], b[2]), min(a[3], b[3])
    inter = max(0.0, x2 - x1) * max(0.0, y2 - y1)
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return float(inter / union) if union > 0 else 0.0


def match_detections(reference: list, candidate: list) -> list[tuple[float, float, float]]:
    """Greedy, best reference score first: (IoU, reference score, candidate score) per matched pair of the same class."""
    used: set[int] = set()
    pairs = []
    for ref_class, ref_score, ref_box in sorted(reference, key=lambda d: -d[1]):
        best, best_k = 0.0, -1
        for k, (cls, _, box) in enumerate(candidate):
            if k in used or cls != ref_class:
                continue
            value = _iou(ref_box, box)
            if value > best:
                best, best_k = value, k
        if best >= MATCH_IOU:
            used.add(best_k)
            pairs.append((best, float(ref_score), float(candidate[best_k][1])))
    return pairs


class _Tally:
    """What the gate counts over a set of frames (all of them, or one camera's)."""

    def __init__(self) -> None:
        self.frames, self.reference, self.candidate = 0, 0, 0
        self.cosines: dict[str, list[float]] = {}
        self.max_abs: dict[str, float] = {}
        self.pairs: list[tuple[float, float, float]] = []

    def add(self, measured: dict) -> None:
        """One frame's `measure_int8` record."""
        self.frames += 1
        for name, value in measured["cosines"].items():
            self.cosines.setdefault(name, []).append(value)
            self.max_abs[name] = max(self.max_abs.get(name, 0.0), measured["max_abs"][name])
        self.reference += measured["detections"][0]
        self.candidate += measured["detections"][1]
        self.pairs += [tuple(pair) for pair in measured["pairs"]]

    def judged(self, gate: AccuracyGate, label: str = "INT8") -> dict:
        """The AccuracyReport fields of these frames, failures included (`label`: what the candidate model is)."""
        outputs = {
            name: {
                "min_cosine": round(min(values), 6),
                "mean_cosine": round(float(np.mean(values)), 6),
                "max_abs_error": round(self.max_abs[name], 6),
            }
            for name, values in self.cosines.items()
        }
        pairs = self.pairs
        recall = len(pairs) / self.reference if self.reference else 1.0
        precision = len(pairs) / self.candidate if self.candidate else 1.0
        mean_iou = float(np.mean([p[0] for p in pairs])) if pairs else 0.0
        drift = float(np.mean([abs(p[1] - p[2]) for p in pairs])) if pairs else 0.0
        failures = []
        for name, stats in outputs.items():
            if stats["mean_cosine"] < gate.min_cosine:
                failures.append(f"{name}: cosine similarity {stats['mean_cosine']:.4f} < {gate.min_cosine}")
        if recall < gate.min_recall:
            failures.append(f"detection recall {recall:.3f} < {gate.min_recall} ({len(pairs)} of {self.reference} FP32 detections found)")
        if precision < gate.min_precision:
            failures.append(f"detection precision {precision:.3f} < {gate.min_precision} ({len(pairs)} of {self.candidate} {label} detections match)")
        if drift > gate.max_mean_score_drift:
            failures.append(f"mean score drift {drift:.4f} > {gate.max_mean_score_drift}")
        return {
            "frames": self.frames,
            "outputs": outputs,
            "fp32_detections": self.reference,
            "int8_detections": self.candidate,
            "recall": round(recall, 4),
            "precision": round(precision, 4),
            "mean_iou": round(mean_iou, 4),
            "mean_score_drift": round(drift, 4),
            "failures": failures,
        }


def _geometries(pipeline: PipelineFile, frames: dict) -> dict:
    """The resize geometry of each frame's recording: one source, or each camera's clip with its own crop."""
    from tools.int8.calibration_frames import camera_clips, clip_geometry, source_geometry

    if not any(isinstance(key, tuple) for key in frames):
        return {None: source_geometry(pipeline)}
    clips = camera_clips(pipeline)
    return {name: clip_geometry(pipeline, clips[name].uri, clips[name].preprocess) for name in dict.fromkeys(key[0] for key in frames)}


def evaluate_int8(
    pipeline: PipelineFile,
    fp32: ModelArtifacts,
    qdq_model,
    frames: dict,
    gate: AccuracyGate,
    progress: Progress | None = None,
    label: str = "INT8",
) -> AccuracyReport:
    """`frames` are preprocessed tensors of held-out frames (index -> tensor) from a source of the pipeline's size;
    with several cameras keyed (camera, index), and each camera is judged on its own frames as well as all together:
    the gate fails when any camera fails (its failures are named `camera NAME: ...`)."""
    return judge_measurements(measure_int8(pipeline, fp32, qdq_model, frames, progress), gate, label)


def measure_int8(pipeline: PipelineFile, fp32: ModelArtifacts, qdq_model, frames: dict, progress: Progress | None = None) -> list[dict]:
    """What the gate counts on each frame, in the order of `frames`, whatever its thresholds: the FP32 and INT8 models'
    outputs compared (cosine, largest absolute error) and their detections matched. One JSON-able record a frame
    (`camera`: None with one camera; `detections`: FP32 and INT8 counts; `pairs`: IoU, FP32 and INT8 score of each
    match), which `judge_measurements` judges against a gate: a verdict under another gate needs no model run."""
    progress = progress or SilentProgress()
    spec = pipeline.spec
    net = (spec.preprocess.resize.width, spec.preprocess.resize.height)
    tensors = fp32.load_tensors()
    geometries = _geometries(pipeline, frames)
    records = []
    with OnnxRuntimeBackend(fp32.model_path, spinning=False) as full, OnnxRuntimeBackend(qdq_model, spinning=False) as quantized:
        posts = [
            create_postprocessor(spec.postprocess, b.outputs, net, tensors, pipeline.class_names(), plugin_folder=pipeline.plugin_folder())
            for b in (full, quantized)
        ]
        ((name, full_input),) = full.inputs.items()
        quantized_input = quantized.inputs[name]
        task = progress.task(f"accuracy gate: FP32 vs INT8 on {len(frames)} held-out frames", total=len(frames))
        for key, tensor in frames.items():
            camera = key[0] if isinstance(key, tuple) else None
            np.copyto(full_input, tensor)
            np.copyto(quantized_input, tensor)
            full.infer()
            quantized.infer()
            cosines, max_abs = {}, {}
            for output, a in full.outputs.items():
                b = quantized.outputs[output]
                x, y = a.reshape(-1).astype(np.float64), b.reshape(-1).astype(np.float64)
                denominator = np.linalg.norm(x) * np.linalg.norm(y)
                cosines[output] = float(x @ y / denominator) if denominator else 1.0
                max_abs[output] = float(np.abs(x - y).max())
            found = [[(d.class_id, d.score, np.array(d.box)) for d in post(geometries[camera])] for post in posts]
            pairs = match_detections(found[0], found[1])
            records.append({"camera": camera, "cosines": cosines, "max_abs": max_abs, "detections": [len(found[0]), len(found[1])], "pairs": pairs})
            task.advance()
        task.done()
    return records


def judge_measurements(records: list[dict], gate: AccuracyGate, label: str = "INT8") -> AccuracyReport:
    """The gate's report on `measure_int8`'s records (as measured, or read back from JSON: the same report)."""
    total = _Tally()
    per_camera = {name: _Tally() for name in dict.fromkeys(r["camera"] for r in records) if name is not None}
    for measured in records:
        for tally in (total, per_camera.get(measured["camera"])):
            if tally is not None:
                tally.add(measured)
    report = total.judged(gate, label)
    cameras = {name: tally.judged(gate, label) for name, tally in per_camera.items()}
    for name, judged in cameras.items():
        judged["passed"] = not judged["failures"]
        report["failures"] += [f"camera {name}: {failure}" for failure in judged["failures"]]
    return AccuracyReport(
        **report,
        score_pairs=[(round(p[1], 5), round(p[2], 5)) for p in total.pairs],
        frame_cosines={name: [round(v, 6) for v in values] for name, values in total.cosines.items()},
        cameras=cameras,
    )


def plot_accuracy(report: AccuracyReport, path) -> None:
    """accuracy.png: INT8 against FP32 scores of matched detections, and each output's cosine per frame."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (scatter, timeline) = plt.subplots(1, 2, figsize=(11, 4.5), dpi=100)
    if report.score_pairs:
        fp32, int8 = zip(*report.score_pairs, strict=True)
        scatter.scatter(fp32, int8, s=10, alpha=0.6)
    scatter.plot([0, 1], [0, 1], color="grey", linewidth=1, linestyle="--")
    scatter.set(
        xlim=(0, 1),
        ylim=(0, 1),
        xlabel="FP32 score",
        ylabel="INT8 score",
        title=f"matched detections: recall {report.recall:.3f}, precision {report.precision:.3f}",
    )
    for name, values in report.frame_cosines.items():
        timeline.plot(range(len(values)), values, marker=".", label=name)
    timeline.set(xlabel="held-out frame", ylabel="cosine similarity INT8 vs FP32", title="output tensors")
    timeline.legend()
    figure.suptitle("INT8 accuracy gate: " + ("PASS" if report.passed else "FAIL: " + "; ".join(report.failures)[:120]))
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)


def add_to_report(report: dict, judged: dict) -> dict:
    """An agreement report (AccuracyReport.as_dict()) with the gate on labels beside it; its FAIL refuses."""
    failures = list(report["failures"]) + ([judged["failure"]] if judged["failure"] else [])
    return {**report, "labels": judged, "failures": failures, "passed": not failures}
