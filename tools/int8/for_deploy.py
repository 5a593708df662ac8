"""INT8 for a deploy: calibrate when no up-to-date artifacts exist, gate on accuracy, hand over what passed.

`deploy` of a pipeline with `model.precision: int8` runs this before anything reaches a target:
the calibration is cached by its content key (prepared model, media, preprocessing, frames, held-out frames,
method), so a second deploy reuses it; the gate's verdict is cached beside it with the gate it
was judged by. When the agreement checks fail, the sensitivity fallback (`calibration.fallback: fp16`) keeps the
worst layers out of INT8 until they pass. What still fails stops the deploy with the numbers, and no target is touched.
`sdk calibrate` runs the same step. With `evaluation.labels` the model the agreement checks chose (after any fallback)
is then judged against FP32 on the labels (the drop of mAP@[.5:.95] with its interval: tools/evaluate/gate.py); a FAIL
there (a drop above `calibration.accuracy.max_map_drop`) refuses it outright, also with `fallback: fp16`: the fallback
search never looks at the labels (decision 1060). That gate lives in a room after this one: the caller
hands over its factory (`label_gate=LabelGate.of`), and a pipeline with labels but no gate is refused, never judged
without them.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from sdk.artifacts import ModelArtifacts
from sdk.errors import ModelError
from sdk.sinks.files import partial_path, publish, write_whole
from sdk.spec.loader import PipelineFile
from tools.int8.accuracy import add_to_report, judge_measurements, measure_int8, plot_accuracy
from tools.int8.calibrate import Calibrate, CalibrationArtifacts, holdout_frames, holdout_keys, write_qdq
from tools.models.prepare import PrepareModel
from tools.progress import Progress, SilentProgress

ACCURACY_FILE = "accuracy.json"
# (pipeline, model, calibration.accuracy.max_map_drop) -> the gate on evaluation.labels (tools/evaluate/gate.py:
# LabelGate.of, with key() and judge(model, progress, label)), or None where the pipeline names no labels.
LabelGateFactory = Callable[[PipelineFile, ModelArtifacts, float], object]


@dataclass(frozen=True)
class Int8Choice:
    """What INT8 deploys: the Q/DQ model (all INT8, or with layers kept in higher precision) and its ranges."""

    calibration: CalibrationArtifacts
    qdq_model: Path
    accuracy: dict  # the gate's report on this very model
    fp16_layers: list[str] = field(default_factory=list)
    precision_file: Path | None = None  # precision.json: the ranking, the search, the kept layers
    dla: bool = False  # the engine is built for DLA: its TensorRT cache ties what DLA needs equal (ElementWise inputs)

    @property
    def ranges(self) -> Path:
        return self.calibration.ranges


def _write_json(path: Path, value: dict) -> None:
    write_whole(path, json.dumps(value, indent=2, default=str) + "\n")


def _refuse(where: str, report: dict, detail: str) -> ModelError:
    return ModelError(
        f"{where}: INT8 fails the accuracy gate on {report['frames']} held-out frames: " + "; ".join(report["failures"]) + detail,
        hint="calibrate with more frames or another method, allow more fallback layers, or relax calibration.accuracy",
    )


class Int8ForDeploy:
    """Settings in the constructor; calling it returns the INT8 choice whose accuracy gate passed (or raises)."""

    def __init__(
        self,
        pipeline: PipelineFile,
        model: ModelArtifacts,
        cache_root: Path,
        progress: Progress | None = None,
        label_gate: LabelGateFactory | None = None,
    ) -> None:
        self.pipeline = pipeline
        self.model = model
        self.cache_root = Path(cache_root)
        self.progress = progress or SilentProgress()
        self.label_gate = label_gate

    def _gate_on_labels(self, pipeline: PipelineFile, model: ModelArtifacts):
        limit = pipeline.spec.calibration.accuracy.max_map_drop
        if self.label_gate is not None:
            return self.label_gate(pipeline, model, limit)
        if pipeline.spec.evaluation.labels is not None:  # never judged without the labels it names
            raise ModelError(
                f"{self.pipeline.path}: evaluation.labels is set, but this INT8 step was given no gate on labels",
                hint="run it as deploy and sdk calibrate do: Int8ForDeploy(..., label_gate=LabelGate.of)",
            )
        return None

    def __call__(self) -> Int8Choice:
        where = f"{self.pipeline.path}: model.precision int8"
        pipeline, model = self.pipeline, self.model
        if self.pipeline.spec.batch_size > 1:  # calibrated and judged one frame per call; the ranges are the batched model's too
            pipeline = one_frame_per_call(self.pipeline)
            model = PrepareModel(pipeline, self.cache_root)()
        gate = self._gate_on_labels(pipeline, model)  # evaluation.labels: checked before calibrating
        artifacts = Calibrate(pipeline, model, self.cache_root, self.progress)()
        key = judged_key(pipeline, gate.key() if gate is not None else None)
        recorded = artifacts.folder / f"judged-{key}" / ACCURACY_FILE
        self.judged_folder = recorded.parent
        cached = json.loads(recorded.read_text()) if recorded.is_file() else None
        if cached is None:
            cached = self._judge(pipeline, model, artifacts, recorded.parent)
            if gate is not None:  # the chosen Q/DQ model against FP32 on the labels, beside the agreement checks
                cached["report"] = add_to_report(cached["report"], gate.judge(Path(cached["qdq_model"]), self.progress, "INT8"))
            _write_json(recorded, cached)
        if not cached["report"]["passed"]:
            kept = cached.get("fp16_layers") or []
            detail = f" (also with {len(kept)} layer(s) kept out of INT8)" if cached.get("fallback_ran") else ""
            raise _refuse(where, cached["report"], detail)
        qdq_model = Path(cached["qdq_model"])
        if model is not self.model:
            qdq_model = self._batched_qdq(artifacts, cached.get("fp16_layers") or [])
        return Int8Choice(
            artifacts,
            qdq_model,
            cached["report"],
            cached.get("fp16_layers") or [],
            Path(cached["precision_file"]) if cached.get("precision_file") else None,
            dla=self.pipeline.spec.model.dla is not None,
        )

    def _batched_qdq(self, artifacts: CalibrationArtifacts, fp16_layers: list[str]) -> Path:
        """The judged Q/DQ model's ranges and kept layers on the batched preparation (same nodes, batch of the cameras)."""
        path = self.judged_folder / f"model.qdq.batch{self.pipeline.spec.batch_size}.onnx"
        if not path.is_file():
            partial = partial_path(path)
            method, exclude = self.pipeline.spec.calibration.method, [*artifacts.output_tail(), *fp16_layers]
            write_qdq(self.model.model_path, partial, artifacts.onnxruntime_ranges, method, exclude=exclude)
            publish(partial, path)
        return path

    judged_folder: Path | None = None

    def copy_reports(self, out: Path) -> None:
        """The gate's reports (accuracy.json/png, sensitivity.png, precision.json) into `out`, passed or not."""
        if self.judged_folder is None or not (self.judged_folder / ACCURACY_FILE).is_file():
            return
        judged = json.loads((self.judged_folder / ACCURACY_FILE).read_text())
        _write_json(Path(out) / ACCURACY_FILE, judged["report"])  # the report itself, as a person reads it
        for name in ("accuracy.png", "sensitivity.png", "precision.json"):
            if (self.judged_folder / name).is_file():
                shutil.copyfile(self.judged_folder / name, Path(out) / name)

    def _judge(self, pipeline: PipelineFile, model: ModelArtifacts, artifacts: CalibrationArtifacts, folder: Path) -> dict:
        from tools.int8.sensitivity import FallbackToFp16, activation_samples, plot_sensitivity

        folder.mkdir(parents=True, exist_ok=True)
        spec = pipeline.spec.calibration
        records, held = gate_measurements(pipeline, model, artifacts, self.progress)  # held: read once, or None
        report = judge_measurements(records, spec.accuracy)  # the gate on them
        if report.passed or spec.fallback == "none":
            plot_accuracy(report, folder / "accuracy.png")  # with a fallback, the final model's report is the one plotted
            return {"report": report.as_dict(), "qdq_model": str(artifacts.qdq_model), "fallback_ran": False}
        if held is None:
            held = holdout_frames(pipeline, model, artifacts, self.progress)
        search = FallbackToFp16(pipeline, model, artifacts, folder, self.progress, max_trials=spec.fallback_max_layers)
        mixed = search(frames=held, baseline=report)
        from tools.int8.sensitivity import ranking_order

        first = holdout_keys(artifacts, limit=4)  # every camera's first 4, as holdout_frames(limit=4) reads them
        few = {key: held[key] for key in held if key in first}
        frames = [few[key] for key in ranking_order(few)[:4]]
        worst = [name for name, _ in mixed.ranking[:4]]
        plot_sensitivity(mixed, activation_samples(model, artifacts, worst, frames), folder / "sensitivity.png")
        plot_accuracy(mixed.report, folder / "accuracy.png")
        return {
            "report": mixed.report.as_dict(),
            "qdq_model": str(mixed.qdq_model),
            "fallback_ran": True,
            "fp16_layers": mixed.fp16_layers,
            "precision_file": str(folder / "precision.json"),
            "baseline": report.as_dict(),
        }


def gate_measurements(pipeline: PipelineFile, model: ModelArtifacts, artifacts: CalibrationArtifacts, progress: Progress | None = None):
    """(records, held-out frames) of the calibration's Q/DQ model against FP32 on its held-out frames
    (tools.int8.accuracy.measure_int8), measured once and kept beside the calibration for any gate; the frames are
    None where the records were kept (read them with holdout_frames where needed)."""
    measured = artifacts.folder / f"measured-{measurement_key(pipeline)}.json"
    if measured.is_file():  # judged before under another gate: the same frames through the same models
        return json.loads(measured.read_text())["frames"], None
    held = holdout_frames(pipeline, model, artifacts, progress)
    records = measure_int8(pipeline, model, artifacts.qdq_model, held, progress)
    _write_json(measured, {"frames": records})
    return records, held


def judged_key(pipeline: PipelineFile, labels_key: str | None) -> str:
    """What a calibration's recorded verdict depends on beyond the calibration's own key: the gate and its fallback
    search, the labels' gate, and everything its measurements depend on (`measurement_key`: a verdict judged under
    one score threshold or decoder is never found under another)."""
    from tools.int8.sensitivity import FALLBACK_SEARCH

    spec = pipeline.spec.calibration
    judged = {
        "gate": spec.accuracy.model_dump(),
        "fallback": spec.fallback,
        "fallback_max_layers": spec.fallback_max_layers,
        "search": FALLBACK_SEARCH,
        "labels": labels_key,
        "measurements": measurement_key(pipeline),
    }
    return hashlib.sha256(json.dumps(judged, sort_keys=True).encode()).hexdigest()[:12]


def measurement_key(pipeline: PipelineFile) -> str:
    """What the gate's measurements of a calibration depend on beyond the calibration's own key (prepared model, media,
    preprocessing, frames, method, and so its Q/DQ model): the postprocessing that finds the detections, its class
    names, and the code of a `kind: python` decoder."""
    from sdk.release import sha256_of

    plugin = pipeline.plugin_folder()
    code = []
    if plugin is not None and plugin.is_dir():
        code = [(str(p.relative_to(plugin)), sha256_of(p)) for p in sorted(plugin.rglob("*")) if p.is_file() and "__pycache__" not in p.parts]
    settings = {"postprocess": pipeline.spec.postprocess.model_dump(mode="json"), "classes": list(pipeline.class_names()), "decoder_code": code}
    return hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:12]


def one_frame_per_call(pipeline: PipelineFile) -> PipelineFile:
    """The pipeline with `batch.size: 1` and its prepared input batch 1: what calibration and the gate run (decision 0631)."""
    spec = pipeline.spec
    model = spec.model
    if model.prepare is not None:
        inputs = {name: (1, *shape[1:]) for name, shape in model.prepare.inputs.items()}
        model = model.model_copy(update={"prepare": model.prepare.model_copy(update={"inputs": inputs})})
    return PipelineFile(spec.model_copy(update={"batch": spec.batch.model_copy(update={"size": 1}), "model": model}), pipeline.path)


def trt_cache_file(artifacts: CalibrationArtifacts, tensorrt: str, dla: bool = False) -> Path:
    """The TensorRT calibration cache for this version (and for a DLA build, with DLA's ties), written once beside the ranges."""
    path = artifacts.folder / f"calibration-trt{tensorrt}{'-dla' if dla else ''}.cache"
    if not path.is_file():
        write_whole(path, artifacts.trt_cache(tensorrt, dla))
    return path
