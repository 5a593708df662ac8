"""The handlers of the commands about a model: `sdk init`, `check`, `prepare`, `calibrate`, `dla-report`, `profile`,
`predict`, and the history's `history` and `compare`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console


def init_command(args: argparse.Namespace, console: Console) -> int:
    from tools.models.init_pipeline import init_pipeline

    result = init_pipeline(args.model, source=args.source, output=args.output, cascade=args.cascade)
    console.print(f"{result.recognised.summary}", highlight=False, markup=False)
    console.print(f"wrote {result.path}", highlight=False, markup=False)
    if result.fill_in:
        console.print(
            f"fill in {len(result.fill_in)} value(s) the model cannot tell; the file is refused until they are:", highlight=False, markup=False
        )
        for key, why in result.fill_in:
            console.print(f"  {key}: {why}", highlight=False, markup=False)
    from tools.models.init_pipeline import RUN_FRAMES

    facts = result.facts
    if facts is not None and facts.still:
        console.print(f"source: a still image, played in a loop ({RUN_FRAMES} frames measure it)", highlight=False, markup=False)
    elif facts is not None and facts.frames is not None and result.loops:
        console.print(
            f"source: {facts.frames} frame(s), fewer than the {RUN_FRAMES} a backed p99 needs: played in a loop (source.replay.loop)",
            highlight=False,
            markup=False,
        )
    then = f"sdk check {result.path}, then deploy --target local {result.path} --frames {RUN_FRAMES}"
    console.print(f"next: {'fill them in, ' if result.fill_in else ''}{then}", highlight=False, markup=False)
    return 0


def check_command(args: argparse.Namespace, console: Console) -> int:
    from tools.console import render_findings
    from tools.validation.pipeline_check import PROBLEM, check_pipeline

    with Console(stderr=True).status("checking (the model is prepared as a deploy prepares it)"):
        result = check_pipeline(args.pipeline, args.target, args.frames, args.labels, args.images)
    render_findings(console, result, f"{result.target} ({result.where})")
    problems = [f for f in result.findings if f.status == PROBLEM]
    if not problems:
        console.print(f"nothing found that stops {result.target} from running and being judged", highlight=False, soft_wrap=True)
        return 0
    console.print(f"{len(problems)} problem(s): {', '.join(f.what for f in problems)}", style="bold red", highlight=False, soft_wrap=True)
    return 1


def prepare_command(args: argparse.Namespace, console: Console) -> int:
    from sdk.spec import load_pipeline
    from tools.models.prepare import PrepareModel
    from tools.state import cache_dir

    pipeline = load_pipeline(args.pipeline)
    prepare = PrepareModel(pipeline, cache_dir())
    with console.status("preparing model"):
        was_cached = prepare.cached
        artifacts = prepare()
    console.print(("cached: " if was_cached else "prepared: ") + str(artifacts.folder))
    console.print(artifacts.meta_path.read_text().strip())
    return 0


def calibrate_command(args: argparse.Namespace, console: Console) -> int:
    import json
    import shutil

    from sdk.engine.platforms import known_tensorrt
    from sdk.spec import load_pipeline
    from sdk.spec.calibration import Calibration
    from sdk.spec.loader import PipelineFile
    from tools.console import RichProgress, render_accuracy
    from tools.evaluate.gate import LabelGate
    from tools.int8.for_deploy import Int8ForDeploy, trt_cache_file
    from tools.models.prepare import PrepareModel
    from tools.state import cache_dir

    for version in args.tensorrt:
        known_tensorrt(version)  # before anything is calibrated: one error line listing the known releases
    pipeline = load_pipeline(args.pipeline)
    if pipeline.spec.calibration is None:  # a pipeline not yet INT8: the section's defaults, said as such
        pipeline = PipelineFile(pipeline.spec.model_copy(update={"calibration": Calibration()}), pipeline.path)
        console.print("no `calibration` section: its defaults (the pipeline's own source, 300 frames, 50 held out, entropy)")
    out = (args.out or Path("reports") / pipeline.spec.name / "int8").resolve()
    out.mkdir(parents=True, exist_ok=True)
    with RichProgress(console) as progress:
        model = PrepareModel(pipeline, cache_dir())()
        step = Int8ForDeploy(pipeline, model, cache_dir(), progress, label_gate=LabelGate.of)
        try:
            choice = step()
        finally:
            step.copy_reports(out)  # accuracy.json/png (and sensitivity.png) also when the gate refused
    render_accuracy(console, choice.accuracy)
    shutil.copyfile(choice.qdq_model, out / "model.qdq.onnx")
    shutil.copyfile(choice.ranges, out / choice.ranges.name)
    if choice.precision_file is not None:
        shutil.copyfile(choice.precision_file, out / choice.precision_file.name)
        console.print(f"kept out of INT8 to pass the gate: {', '.join(choice.fp16_layers)}")
    for version in args.tensorrt:
        shutil.copyfile(trt_cache_file(choice.calibration, version, choice.dla), out / f"calibration-trt{version}.cache")
    amax = choice.calibration.amax()
    cameras = json.loads(choice.ranges.read_text()).get("cameras", {})  # several cameras: how many frames each gave
    drawn = ", ".join(f"{name} {c['frames']} + {c['holdout_frames']} held out" for name, c in cameras.items())
    drawn = f"; frames per camera: {drawn}" if drawn else ""
    console.print(f"{len(amax)} tensors calibrated ({pipeline.spec.calibration.method}){drawn}; artifacts in {out}")
    return 0


def profile_command(args: argparse.Namespace, console: Console) -> int:
    from tools.console import RichProgress
    from tools.perf.report import render
    from tools.perf.run import Profile

    frames = args.frames
    if frames is not None and not 1 <= frames <= 100000:
        from sdk.errors import ConfigError

        raise ConfigError(f"--frames: {frames} is out of range; allowed: 1 to 100000", hint="50 frames give a steady median")
    with RichProgress(console) as progress:
        result = Profile(args.pipeline, args.target, frames=frames, json_path=args.json, report_dir=args.report_dir, progress=progress)()
    render(console, result.report)
    sys.stderr.write(f"report: {result.report_dir}\n")
    return 0


def predict_command(args: argparse.Namespace, console: Console) -> int:
    from tools.perf.report import render_predicted_layers, short_name, write_json
    from tools.perf.run import predict_pipeline

    if args.tensorrt:
        from sdk.engine.platforms import known_tensorrt

        known_tensorrt(args.tensorrt)
    if args.json:  # before the prediction: never over the pipeline file or its model, never into a folder that refuses it
        from tools.output_paths import check_output_file, pipeline_reads

        check_output_file(args.json, "--json", pipeline_reads(args.pipeline))
    report = predict_pipeline(args.pipeline, args.platform, args.precision, args.dla, args.tensorrt, args.power_mode, args.batch)
    if args.json:
        write_json(report, args.json, "--json")
    total = report["total"]
    console.print(
        f"{report['pipeline']} on {report['platform']}{' (' + report['power_mode'] + ')' if report.get('power_mode') else ''}, "
        f"{report['backend']} {report['precision']}: {total['predicted_ms']:.3f} ms predicted"
        + (f" ({total['transitions_ms']:.3f} ms in GPU<->DLA transitions)" if total["transitions_ms"] else "")
        + (f" under ONNX Runtime's profiler, as `sdk profile` measures each layer; {total['plain_ms']:.3f} ms in a run without it"
           if total.get("plain_ms") is not None else ""),
        highlight=False,
        markup=False,
    )
    if report.get("power"):
        console.print(report["power"]["text"], highlight=False, markup=False)
    if report.get("fusions"):
        f = report["fusions"]
        console.print(f"TensorRT fusions: {f['into_convolutions']} activation/pointwise layers in their convolutions' kernels, "
                      f"{f['concat_in_place']} concatenations in place, {f['views']} reshapes as views, {f['qdq_folded']} Q/DQ folded; "
                      f"{total['without_trt_fusions_ms']:.3f} ms without them (--layers shows each layer)",
                      highlight=False, markup=False)  # fmt: skip
    if args.layers:
        render_predicted_layers(console, report)
    for number, item in enumerate(report["bottlenecks"][:5], 1):
        name = short_name(item["name"], 70, [layer["name"] for layer in report["layers"]])
        text = f"{number}. {name} ({item['op']}) {item['ms']:.3f} ms, {item['share']:.0%}, {item['bound']}-bound"
        console.print(text, highlight=False, markup=False)
    for note in report["notes"]:
        console.print(f"note: {note}", highlight=False, markup=False)
    if args.json:
        sys.stderr.write(f"JSON: {args.json}\n")
    return 0


def dla_report_command(args: argparse.Namespace, console: Console) -> int:
    from sdk.engine.platforms import known_tensorrt
    from sdk.errors import ConfigError
    from tools.dla.render import render_dla_report, write_dla_json
    from tools.dla.report import DlaAnalysis, TargetFacts, target_facts

    # A version typed by hand must be a release the SDK knows, checked before the model is prepared (decision 0402).
    typed = known_tensorrt(args.tensorrt) if args.tensorrt else None
    if args.platform is not None:
        if typed is None:
            raise ConfigError(
                "--platform needs --tensorrt (the version the engine will be built with)", hint="e.g. --platform jetson-agx-orin --tensorrt 10.3"
            )
        facts = TargetFacts(args.platform, typed)
    else:
        facts = target_facts(args.target, str(typed) if typed is not None else None)
    if args.json:
        from tools.output_paths import check_output_file, pipeline_reads

        reads = pipeline_reads(args.source) if args.source.suffix in (".yaml", ".yml") else [(args.source, "the model")]
        check_output_file(args.json, "--json", reads)
    analysis = DlaAnalysis(args.source, facts, args.precision)
    with console.status("analysing"):
        report = analysis()
    render_dla_report(console, report, every_layer=args.all)
    if args.json:
        write_dla_json(report, args.json)
        console.print(f"JSON: {args.json}")
    analysis.check_contract(report)  # after the table: the numbers that break the contract are on screen
    return 0


def history_command(args: argparse.Namespace, console: Console) -> int:
    from tools.history.commands import history

    return history(args, console)


def compare_command(args: argparse.Namespace, console: Console) -> int:
    from tools.history.commands import compare

    return compare(args, console)


def optimize_command(args: argparse.Namespace, console: Console) -> int:
    from tools.optimize.command import optimize

    return optimize(args, console)


__all__ = [
    "calibrate_command",
    "check_command",
    "compare_command",
    "dla_report_command",
    "history_command",
    "init_command",
    "optimize_command",
    "predict_command",
    "prepare_command",
    "profile_command",
]
