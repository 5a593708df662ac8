"""`sdk optimize`: candidates built, judged by the accuracy gate against the original FP32 model, measured, the front.

1. The pipeline's model is prepared (the cached preparation every command shares) and analysed (channels.py).
2. Calibration and held-out frames are the pipeline's own seeded draw (`calibration:`), as `sdk calibrate` uses.
3. Each consumer's input Hessian, each space's elimination, the allocation by predicted time saved on the target per
   unit of reconstruction error (allocate.py); one plan (channel counts) per wanted predicted saving.
4. Per plan: the magnitude baseline (no refit), channel pruning with reconstruction (elimination, local refit, then
   the sequential refit against the original), and the same with FSKD's 1x1 corrections folded in; 2:4 sparsity
   (sparsity.py) on the eligible layers of the best reconstruction, where the target can use it.
5. Every candidate goes through the accuracy gate (tools/int8/accuracy.py) against the original FP32 model on the held-out
   frames (with `evaluation.labels`, also its mAP against the original's on them: tools/evaluate/gate.py), and is
   measured on ONNX Runtime's CPU backend beside the original in alternating rounds (measure.py).
6. The front, the fastest candidate that passes the gate (and the budget), NAME.optimized.onnx and a pipeline file
   that uses it; report.json and report.html; the run goes into the history.
"""

from __future__ import annotations

import json
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sdk.errors import EXIT_BUDGET_FAIL, EXIT_INCONCLUSIVE, EXIT_PASS, ConfigError
from tools.optimize.candidate import Candidate, metadata
from tools.progress import Progress, SilentProgress

DEFAULT_SAVINGS = (0.1, 0.2, 0.3)  # predicted shares of the target's time to save, one plan each
DEFAULT_CALIBRATION_FRAMES = 32
REPORT_FILE = "report.json"
METHODS = ("magnitude", "reconstruct", "reconstruct+fskd")


@dataclass(frozen=True)
class Settings:
    target: str | None = None
    platform: str | None = None
    budget_ms: float | None = None
    min_recall: float | None = None
    min_precision: float | None = None
    savings: tuple[float, ...] = DEFAULT_SAVINGS
    calibration_frames: int = DEFAULT_CALIBRATION_FRAMES
    holdout_frames: int | None = None  # default: the pipeline's calibration.holdout_frames
    rounds: int = 7
    runs: int = 10
    fskd: bool = True
    sparsity: bool = True
    report_dir: Path | None = None
    write: bool = True  # write NAME.optimized.onnx and the pipeline file


@dataclass
class OptimizeResult:
    report: dict
    report_dir: Path
    exit_code: int


class Optimize:
    def __init__(self, pipeline_path: Path, settings: Settings, progress: Progress | None = None) -> None:
        if (settings.target is None) == (settings.platform is None):
            raise ConfigError("give one of --target T or --platform P", hint="e.g. --target local, or --platform jetson-agx-orin")
        self.pipeline_path = Path(pipeline_path)
        self.settings = settings
        self.progress = progress or SilentProgress()

    # -- where it will run ---------------------------------------------------------------------------------
    def _platform(self) -> str:
        if self.settings.platform is not None:
            return "host" if self.settings.platform == "host" else _resolved(self.settings.platform)
        from tools.targets import LocalTarget, resolve_targets

        targets = resolve_targets(self.settings.target)
        if len(targets) != 1:
            raise ConfigError(f"--target {self.settings.target!r} names {len(targets)} targets", hint="optimize for one target at a time")
        (target,) = targets
        return "host" if isinstance(target, LocalTarget) else _resolved(target.spec.platform)

    def _check_outputs(self) -> None:
        """Before any work: the report folder, and the folders of the optimized model and pipeline file, take files."""
        from tools.output_paths import check_output_file, check_output_folder, pipeline_reads

        reads = pipeline_reads(self.pipeline_path)
        if self.settings.report_dir is not None:
            check_output_folder(self.settings.report_dir, "--report-dir", reads)
        if self.settings.write:
            model = next((path for path, what in reads if "model.path" in what), None)
            if model is not None:
                check_output_file(model.with_name(f"{model.stem}.optimized.onnx"), "the optimized model", reads)
            check_output_file(
                self.pipeline_path.with_name(f"{self.pipeline_path.stem}.optimized{self.pipeline_path.suffix}"), "the optimized pipeline", reads
            )

    def __call__(self) -> OptimizeResult:
        from tools.perf.run import prepared

        started = time.time()
        platform = self._platform()
        self._check_outputs()
        pipeline, artifacts = prepared(self.pipeline_path, self.progress)
        spec = pipeline.spec
        if spec.calibration is None:
            raise ConfigError(
                f"{pipeline.path}: no `calibration` section: optimize needs calibration and held-out frames",
                hint="add `calibration: {frames: 300, holdout_frames: 50}` (see the guide Make it fit)",
            )
        if spec.multi_camera:
            raise ConfigError(f"{pipeline.path}: optimize takes a pipeline of one camera", hint="optimize the model in a one-camera pipeline")
        gate = spec.calibration.accuracy.model_copy(
            update={k: v for k, v in (("min_recall", self.settings.min_recall), ("min_precision", self.settings.min_precision)) if v is not None}
        )
        from tools.reports.report_dirs import default_report_dir, mark_finished, mark_unfinished

        label = self.settings.target or self.settings.platform
        report_dir = (self.settings.report_dir or default_report_dir(pipeline, label, "optimize")).resolve()
        context = _Context(pipeline, artifacts, platform, gate, self.settings, self.progress)
        report = context.run()  # the report folder is made once there is a report: a failed or interrupted run leaves none
        report_dir.mkdir(parents=True, exist_ok=True)
        mark_unfinished(report_dir, "optimize")
        chosen = report.pop("_chosen", None)
        if chosen is not None and self.settings.write:
            from tools.optimize.outputs import write_outputs

            report["outputs"] = write_outputs(pipeline, artifacts, chosen, report)
        report.update({
            "target": self.settings.target or f"platform:{platform}", "pipeline": spec.name, "pipeline_file": str(pipeline.path),
            "duration_s": round(time.time() - started, 1),
        })  # fmt: skip
        from tools.optimize.report import write_html, write_json

        write_json(report, report_dir / REPORT_FILE)
        write_html(report, report_dir)
        mark_finished(report_dir)
        from tools.history.hook import finished

        finished(report_dir, "optimize")  # into the history; never fails the run
        code = {"PASS": EXIT_PASS, "FAIL": EXIT_BUDGET_FAIL}.get(report["verdict"], EXIT_INCONCLUSIVE)
        return OptimizeResult(report, report_dir, code)


def _resolved(platform: str) -> str:
    from tools.perf.platforms import resolve_platform

    return resolve_platform(platform)


class _Context:
    """One run's state: the model, its analysis, the frames and the predictor."""

    def __init__(self, pipeline, artifacts, platform: str, gate, settings: Settings, progress: Progress) -> None:
        self.pipeline, self.artifacts, self.platform, self.gate = pipeline, artifacts, platform, gate
        self.settings, self.progress = settings, progress
        self.precision = pipeline.spec.model.precision
        self.notes: list[str] = []
        from tools.evaluate.gate import LabelGate

        self.labels = LabelGate.of(pipeline, artifacts, gate.max_map_drop)  # evaluation.labels: checked before any candidate

    # -- frames ------------------------------------------------------------------------------------------
    def _frames(self) -> tuple[list[np.ndarray], dict[int, np.ndarray]]:
        from tools.int8.calibrate import count_frames, iter_preprocessed_frames, select_frames
        from tools.int8.calibration_frames import evenly

        spec = self.pipeline.spec.calibration
        selection = select_frames(count_frames(self.pipeline), spec)
        meta = json.loads(self.artifacts.meta_path.read_text())
        ((_, shape),) = meta["inputs"].items()
        count = min(self.settings.calibration_frames, len(selection.calibration))
        chosen = set(evenly(list(selection.calibration), count))
        held = selection.holdout[: self.settings.holdout_frames or spec.holdout_frames]
        task = self.progress.task(f"reading {len(chosen)} calibration and {len(held)} held-out frames", total=None)
        frames = dict(iter_preprocessed_frames(self.pipeline, chosen | set(held), tuple(shape)))
        task.done()
        return [frames[i] for i in sorted(chosen)], {i: frames[i] for i in held}

    # -- the performance model ---------------------------------------------------------------------------
    def _predictor(self, layers):
        if self.platform == "host":
            from tools.perf.predict import predict_host
            from tools.perf.targets import host_prediction

            _, peaks = host_prediction(layers, self.pipeline)
            memo: dict = {}  # the groups' predictions by their layers: each resized model costs only what it changed

            def plain(model) -> float:  # a run without the profiler, as the candidates are measured (decision 1263)
                found = predict_host(model, peaks, memo=memo)
                return found.plain_ms if found.plain_ms is not None else found.total_ms

            return plain
        from tools.perf.platforms import machine
        from tools.perf.predict import predict_device

        target = machine(self.platform)
        precision = {"int8": "int8"}.get(self.precision, "fp16")
        memo: dict = {}
        return lambda model, sparse=False: predict_device(model, target, precision, sparse=sparse, memo=memo).total_ms

    def run(self) -> dict:
        from tools.optimize.allocate import MIN_KEEP, Resizer, alignment, allocate, counts_for, plan_at
        from tools.optimize.channels import Channels
        from tools.optimize.graph import Graph
        from tools.optimize.pruning import Pruner
        from tools.optimize.statistics import input_hessians
        from tools.perf.layers import load_layers
        from tools.perf.predict import nchwc_block

        settings = self.settings
        graph = Graph.load(self.artifacts.model_path)
        channels = Channels(graph)
        blocked = [{"layer": s.name(), "channels": s.size, "why": s.blocked or ["nothing reads it as a whole"]} for s in channels.blocked()]
        prunable = channels.prunable()
        report: dict = {
            "platform": self.platform, "precision": self.precision, "budget_ms": settings.budget_ms,
            "gate": self.gate.model_dump(mode="json"), "blocked": blocked,
            "prunable": [
                {"layer": s.name(), "channels": s.size, "producers": s.producers, "consumers": [c for c, _ in s.consumers]} for s in prunable
            ],
        }  # fmt: skip
        layers = load_layers(self.artifacts.model_path)
        predict = self._predictor(layers)
        original_ms = predict(layers)
        report["original"] = {"predicted_ms": round(original_ms, 4), "model": str(self.pipeline.model_path)}
        if not prunable:
            report.update(verdict="INCONCLUSIVE", candidates=[], front=[], chosen=None)
            report["notes"] = ["nothing to prune: every convolution's channels reach a head, an output or an op whose channels are fixed; "
                               "the model is left as it is (see `blocked`)"]  # fmt: skip
            return report
        calibration, holdout = self._frames()
        report["frames"] = len(holdout)
        report["calibration_frames"] = len(calibration)
        pruner = Pruner(graph, channels)
        threads = self.pipeline.spec.model.threads
        task = self.progress.task(f"input statistics of {len(pruner.probes())} layers on {len(calibration)} frames", total=len(calibration))
        pruner.hessians = input_hessians(graph, pruner.probes(), _counted(calibration, task), threads)
        task.done()
        align = alignment(self.precision, nchwc_block() if self.platform == "host" else 0)
        options = {s.id: counts_for(s.size, align) for s in prunable}
        options = {sid: o for sid, o in options.items() if o}
        # Each space's elimination (least squares) goes as far down its counts as the allocation asks about.
        task = self.progress.task(f"choosing channels in {len(options)} spaces by predicted time saved per unit of error", total=None)
        pruner.eliminate(options)
        errors = {sid: (lambda count, sid=sid: pruner.error(sid, count)) for sid in options}
        largest = max(settings.savings, default=None)  # the steps after it would change no plan
        resized = Resizer(layers, channels)  # each layer made once per counts of its own spaces
        base, steps = allocate(options, errors, lambda counts: predict(resized(counts)), saving=largest)
        task.done()
        plans: dict[float, dict[int, int]] = {}
        for saving in settings.savings:
            plan = plan_at(steps, base, saving)
            if plan is not None and plan not in plans.values():
                plans[saving] = plan
        pruner.release()
        missed = [s for s in settings.savings if plan_at(steps, base, s) is None]
        if missed:
            reached = 1 - min((step.ms for step in steps), default=base) / base
            report.setdefault("notes", []).append(
                f"the performance model predicts at most {reached:.0%} saved on {self.platform} by pruning (kept >= {MIN_KEEP:.0%} of each "
                f"layer's channels): no plan for {', '.join(f'{m:.0%}' for m in missed)}"
            )
        report["alignment"] = align
        report["plans"] = {
            f"{s:.0%}": {pruner.spaces[sid].name(): [pruner.spaces[sid].size, n] for sid, n in sorted(p.items())} for s, p in plans.items()
        }
        candidates = self._candidates(pruner, plans, calibration)
        for candidate in candidates:
            plan = plans[candidate.saving]
            candidate.predicted_ms = predict(resized(plan))
            candidate.counts = {pruner.spaces[sid].name(): [pruner.spaces[sid].size, n] for sid, n in sorted(plan.items())}
        candidates += self._sparse(candidates, calibration, layers, channels, plans, pruner)
        self._judge(candidates, holdout)
        self._measure(candidates, holdout)
        self.notes = report.pop("notes", [])
        report.update(self._front(candidates, original_ms))
        return report

    # -- candidates --------------------------------------------------------------------------------------
    def _candidates(self, pruner, plans: dict, calibration: list[np.ndarray]) -> list[Candidate]:
        from tools.optimize.sweep import sweep

        found: list[Candidate] = []
        lanes, owners = [], []
        for saving, plan in plans.items():
            tag = f"{saving:.0%}"
            magnitude, _ = pruner.build(plan, "magnitude")
            found.append(Candidate(f"magnitude@{tag}", "magnitude", saving, magnitude))
            local, keep = pruner.build(plan, "reconstruct")
            refits = pruner.points(local, keep, correct=False)
            reconstructed = Candidate(f"reconstruct@{tag}", "reconstruct", saving, local)
            found.append(reconstructed)
            lanes.append((local, refits))
            owners.append(reconstructed)
            if self.settings.fskd:
                distilled = local.copy()
                corrections = [p for p in pruner.points(distilled, keep, correct=True) if _correctable(distilled, p.node)]
                candidate = Candidate(f"reconstruct+fskd@{tag}", "reconstruct+fskd", saving, distilled)
                found.append(candidate)
                lanes.append((distilled, refits + corrections))
                owners.append(candidate)
        refitted = len({p.node for _, points in lanes for p in points})
        task = self.progress.task(f"refitting {len(lanes)} pruned models against the original, layer by layer", total=refitted)
        fitted = sweep(lanes, pruner.graph, calibration, self.pipeline.spec.model.threads, tick=task.advance)
        task.done()
        for candidate, errors in zip(owners, fitted, strict=True):
            candidate.errors = {name: round(value, 6) for name, value in errors.items()}
        for candidate in found:
            candidate.model = candidate.model.to_model(metadata(candidate))
        return found

    def _sparse(self, candidates, calibration, layers, channels, plans, pruner) -> list[Candidate]:
        """2:4 sparsity on the eligible layers of the best reconstruction (sparsity.py); none where the target has no
        sparse tensor cores or DLA that takes it (the CPU backend gains nothing)."""
        if not self.settings.sparsity:
            return []
        from tools.optimize import sparsity

        return sparsity.candidates(self, candidates, calibration, layers, channels, plans, pruner)

    # -- the gate and the clock --------------------------------------------------------------------------
    def _judge(self, candidates: list[Candidate], holdout: dict[int, np.ndarray]) -> None:
        from tools.int8.accuracy import add_to_report, evaluate_int8
        from tools.optimize.graph import model_bytes

        task = self.progress.task(f"accuracy gate: {len(candidates)} candidates against the original FP32 model", total=len(candidates))
        with tempfile.TemporaryDirectory(prefix="sdk-optimize-") as scratch:
            for candidate in candidates:
                path = Path(scratch) / "candidate.onnx"
                path.write_bytes(model_bytes(candidate.model))
                judged = evaluate_int8(self.pipeline, self.artifacts, path, holdout, self.gate, label="optimized")
                candidate.accuracy = {
                    "recall": judged.recall, "precision": judged.precision, "mean_iou": judged.mean_iou,
                    "mean_score_drift": judged.mean_score_drift, "reference_detections": judged.fp32_detections,
                    "detections": judged.int8_detections, "min_cosine": min((o["mean_cosine"] for o in judged.outputs.values()), default=1.0),
                    "failures": judged.failures,
                }  # fmt: skip
                if self.labels is not None:  # evaluation.labels: its mAP against the original's on them, beside the agreement
                    candidate.accuracy = add_to_report(candidate.accuracy, self.labels.judge(path, self.progress, "optimized"))
                    candidate.accuracy.pop("passed")
                task.advance()
        task.done()

    def _measure(self, candidates: list[Candidate], holdout: dict[int, np.ndarray]) -> None:
        from tools.optimize.graph import model_bytes
        from tools.optimize.measure import alternate

        frame = next(iter(holdout.values()))
        models = {"original": self.artifacts.model_path.read_bytes()}
        models |= {c.name: model_bytes(c.model) for c in candidates if "+2:4" not in c.method}  # 2:4 changes nothing on a CPU
        spec = self.pipeline.spec.model
        task = self.progress.task(
            f"measuring {len(models)} models on the CPU backend, {self.settings.rounds} alternating rounds", total=self.settings.rounds
        )
        timings = alternate(models, frame, spec.threads, spec.spinning, self.settings.rounds, self.settings.runs, tick=task.advance)
        task.done()
        self.original_timing = timings["original"]
        for candidate in candidates:
            timing = timings.get(candidate.name) or timings.get(candidate.name.replace("+2:4", ""))
            if timing is None:
                continue
            from tools.optimize.measure import ratio_spread

            low, high = ratio_spread(self.original_timing, timing)
            candidate.measured = {**timing.as_dict(), "speedup": round(self.original_timing.median_ms / timing.median_ms, 4),
                                  "speedup_range": [round(low, 4), round(high, 4)]}  # fmt: skip

    # -- the front and the choice ------------------------------------------------------------------------
    def _front(self, candidates: list[Candidate], original_ms: float) -> dict:
        host = self.platform == "host"

        def speed(c: Candidate) -> float:  # what "fastest" means: measured here for this CPU, predicted for a module
            return c.measured["median_ms"] if host else c.predicted_ms

        def quality(c: Candidate) -> float:
            return min(c.accuracy["recall"], c.accuracy["precision"])

        front = []
        for c in candidates:
            dominated = any(
                speed(o) <= speed(c) and quality(o) >= quality(c) and (speed(o) < speed(c) or quality(o) > quality(c))
                for o in candidates
                if o is not c
            )
            if not dominated:
                front.append(c.name)
        original_speed = self.original_timing.median_ms if host else original_ms
        # The baseline is measured, never shipped; on a module the prediction decides (this CPU's clock is a check only).
        eligible = [c for c in candidates if c.passed and speed(c) < original_speed and c.method != "magnitude"]
        budget = self.settings.budget_ms
        meeting = [c for c in eligible if budget is None or speed(c) <= budget]
        chosen = min(meeting or eligible, key=lambda c: (speed(c), c.name), default=None)
        notes = []
        if not candidates:
            verdict = "INCONCLUSIVE"
            notes.append("no candidate could be built (see the notes above): nothing written")
        elif chosen is None:
            verdict = "INCONCLUSIVE"
            notes.append("no candidate passes the accuracy gate and runs faster than the original: nothing written")
        elif budget is not None and speed(chosen) > budget:
            verdict = "FAIL"
            notes.append(f"no candidate that passes the gate meets the budget of {budget} ms; the fastest that passes is written")
        else:
            verdict = "PASS"
        baseline = None
        if chosen is not None:
            baseline = next((c.name for c in candidates if c.method == "magnitude" and c.saving == chosen.saving), None)
        return {
            "verdict": verdict,
            "original": {"predicted_ms": round(original_ms, 4), "measured": self.original_timing.as_dict(), "model": str(self.pipeline.model_path)},
            "candidates": [_describe(c, c.name in front) for c in candidates],
            "front": front,
            "chosen": chosen.name if chosen else None,
            "baseline": baseline,
            "speed_by": "measured" if host else "predicted",
            "notes": self.notes + notes,
            "_chosen": chosen,
        }


def _counted(frames: list[np.ndarray], task):
    """The frames, one by one, each counted on `task` once it has been used."""
    for frame in frames:
        yield frame
        task.advance()


def _correctable(graph, name: str) -> bool:
    node = next(n for n in graph.nodes if n.name == name)
    return node.op_type == "Conv" and graph.conv(node).group == 1


def _describe(c: Candidate, on_front: bool) -> dict:
    return {
        "name": c.name, "method": c.method, "saving": c.saving, "predicted_ms": round(c.predicted_ms, 4) if c.predicted_ms is not None else None,
        "measured": c.measured, "accuracy": c.accuracy, "passed": c.passed, "on_front": on_front,
        "channels": c.counts, "sparse_layers": c.sparse_layers,
        "reconstruction_error": {"max": max(c.errors.values(), default=0.0), "mean": float(np.mean(list(c.errors.values()))) if c.errors else 0.0,
                                 "layers": c.errors},
    }  # fmt: skip
