"""The host's part of an acceptance run: checks only the host can make, merged into the device's verdict.

The device judges latency, deadline, drops and its own environment. The host adds what needs the
workstation: accuracy against the FP32 reference and against labels (`evaluation.labels`), and determinism across repeated runs. Their
checks join report.json's (verdict recombined: FAIL beats INCONCLUSIVE beats PASS), junit.xml
is rewritten with one case per check, and report.html with its plots is drawn.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

from sdk.artifacts import ModelArtifacts
from sdk.runtime.junit import write_junit
from sdk.runtime.report import REPORT_FILE, write_report
from sdk.runtime.verdict import BudgetCheck, combine, describe_verdict
from sdk.spec.loader import PipelineFile
from sdk.spec.schema import Determinism
from tools.evaluate.judge import unlabelled_checks
from tools.evaluate.labelled_run import labels_of, score_run
from tools.evidence.determinism import compare_runs
from tools.evidence.html_report import write_html
from tools.evidence.reference import REFERENCE_FILE, compare_per_camera, compare_with_reference, run_reference
from tools.progress import Progress, SilentProgress
from tools.reports.detections_file import read_detections

REFERENCE_SIDE = "the FP32 model on ONNX Runtime (CPU), on the host"


def comparison(report: dict, precision: str, reference: str | None = None, model: str | None = None) -> dict:
    """What the accuracy checks compared with what, and whether that comparison can find anything. `reference`: the
    original model an optimized pipeline is judged against (`model.reference`, written by `sdk optimize`)."""
    backend = report.get("backend") or "unknown backend"
    runtime = backend.split(" ", 1)[0]
    ran = f"{backend}, on {report.get('target')}"
    if reference:
        side = f"the original FP32 model {reference} on ONNX Runtime (CPU), on the host"
        summary = f"the original model {reference} against the optimized {model or 'model'} ({backend}, {precision}): what the optimization costs"
        return {"reference": side, "run": ran, "precision": precision, "trivial": False, "summary": summary}
    if runtime == "onnxruntime" and "FP32 model" in backend:
        trivial = True
        summary = (
            "trivial: both sides run the FP32 model on ONNX Runtime on the CPU, so this only shows that the run is "
            "consistent with the host (same frames, preprocessing and decoding), not what a conversion costs"
        )
    elif runtime == "onnxruntime" and precision == "int8":
        trivial = False
        summary = "the FP32 model against the INT8 Q/DQ model, both on ONNX Runtime: what quantization costs"
    else:
        trivial = False
        summary = f"the host's FP32 model on ONNX Runtime against the device's {backend} ({precision}): what the engine and precision cost"
    return {"reference": REFERENCE_SIDE, "run": ran, "precision": precision, "trivial": trivial, "summary": summary}


def _on_labels(report_dir: Path, pipeline: PipelineFile, report: dict, progress: Progress) -> list[BudgetCheck]:
    """With `evaluation.labels`: the run's own detections scored against them (report.json's `labels_evaluation`, the
    per-image matches in label_matches.npz); without, each budget on labels INCONCLUSIVE, saying where it is judged."""
    if labels_of(pipeline) is None:
        return unlabelled_checks(pipeline.spec.budgets.accuracy)
    started = time.monotonic()
    task = progress.task("scoring the run's detections against the labels", total=None)
    scored = score_run(pipeline, report_dir)
    task.done()
    if scored.matches is not None:
        from tools.history.label_matches import write_matches

        write_matches(scored.matches, report_dir)
    duration = round(time.monotonic() - started, 3)
    report["labels_evaluation"] = scored.section | {"duration_s": duration}
    report["notes"] = report["notes"] + scored.section["notes"]
    return [replace(c, duration_s=duration) for c in scored.checks]


def accept(
    report_dir: Path,
    pipeline: PipelineFile,
    artifacts: ModelArtifacts,
    report: dict,
    progress: Progress | None = None,
    repeats: list[Path] = (),
) -> dict:
    """Add the host's checks to `report` (from `report_dir`), rewrite report.json and junit.xml, draw report.html."""
    progress = progress or SilentProgress()
    budgets = pipeline.spec.budgets
    added: list[BudgetCheck] = []
    if budgets.accuracy is not None:
        started = time.monotonic()
        run_frames = read_detections(report_dir / "detections.jsonl")
        frames = max((key[1] if isinstance(key, tuple) else key for key in run_frames), default=-1) + 1  # per camera
        task = progress.task(f"FP32 reference on the host: {frames} frames", total=None)
        reference = run_reference(pipeline, artifacts, frames, report_dir / REFERENCE_FILE)
        task.done()
        thresholds = budgets.accuracy.reference_thresholds()  # the budgets on labels are judged below, not here
        result = compare_with_reference(reference, report_dir / "detections.jsonl", thresholds)
        duration = round(time.monotonic() - started, 3)
        model = pipeline.spec.model
        compared = comparison(report, model.precision, model.reference, model.path)
        report["accuracy"] = result.as_dict() | {"thresholds": thresholds.model_dump(), "compared": compared, "duration_s": duration}
        if pipeline.spec.multi_camera:  # judged per camera too: one camera's misses are not averaged away by the others
            own = {name: budgets.cameras[name].accuracy if name in budgets.cameras else None for name in pipeline.spec.cameras}
            each = compare_per_camera(reference, report_dir / "detections.jsonl", {name: limits or thresholds for name, limits in own.items()})
            report["accuracy"]["cameras"] = {name: r.as_dict() | {"thresholds": r.thresholds.model_dump()} for name, r in each.items()}
            added += [
                replace(c, name=c.name.replace("accuracy.", f"cameras.{name}.accuracy.", 1), duration_s=duration)
                for name, r in each.items()
                for c in r.checks()
            ]
        if compared["trivial"]:
            suffix = "; trivial comparison: same runtime and precision on both sides"
        else:
            suffix = f"; against the original model {model.reference}" if model.reference else ""
        added += [replace(c, detail=c.detail + suffix, duration_s=duration) for c in result.checks()]
    added += _on_labels(report_dir, pipeline, report, progress)
    if repeats:
        tolerance = budgets.determinism or Determinism()
        report["determinism_runs"] = []
        for run, folder in enumerate(repeats, start=2):
            result = compare_runs(report_dir, folder, tolerance)
            wall = json.loads((folder / REPORT_FILE).read_text()).get("wall_s")
            report["determinism_runs"].append(
                {"run": run, "folder": folder.name, "wall_s": wall, **result.as_dict()} | {"tolerance": tolerance.model_dump()}
            )
            added.append(replace(result.check(run), duration_s=wall))
    if added:
        checks = [BudgetCheck(**c) for c in report["checks"]] + added
        verdict, _, _ = combine(checks)
        _, _, new_notes = combine(added)
        report = {**report, "verdict": verdict, "checks": [c.as_dict() for c in checks], "notes": report["notes"] + new_notes}
    report["verdict_detail"] = describe_verdict(report["verdict"], report["checks"])
    write_report(report, report_dir)
    write_junit(report, report_dir)
    task = progress.task("drawing report.html", total=None)
    write_html(report_dir)
    task.done()
    return json.loads((Path(report_dir) / REPORT_FILE).read_text())
