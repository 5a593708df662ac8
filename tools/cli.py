"""The host command line: `sdk ...` and its shortcut `deploy ...`.

The one error boundary of the host: an SdkError becomes one `error:` line and one `hint:`
line on stderr with its exit code, never a traceback (set SDK_DEBUG=1 to see one).
Exit codes: 0 PASS, 1 user error, 2 usage, 3 budget FAIL, 4 INCONCLUSIVE.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from rich.console import Console

from sdk.errors import SdkError


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value


def _add_deploy_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("pipeline", type=Path, help="pipeline file (YAML)")
    parser.add_argument("--target", "-t", required=True, help="target name: `local` or one from targets/")
    parser.add_argument("--frames", type=_positive, help="stop after N frames (default: the pipeline's replay setting)")
    parser.add_argument("--report-dir", type=Path, help="where report.json and detections.jsonl go (default: reports/<pipeline name>)")
    parser.add_argument("--parallel", type=_positive, default=4, help="fleets: targets deployed at once (default 4)")
    parser.add_argument("--canary", action="store_true", help="fleets: the first target must pass before the others start")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sdk", description="Deploy perception pipelines to NVIDIA vehicle computers.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    deploy = commands.add_parser("deploy", help="prepare, stage, run and judge a pipeline on a target")
    _add_deploy_arguments(deploy)
    prepare = commands.add_parser("prepare", help="prepare the model (graph cut, static shapes, constants)")
    prepare.add_argument("pipeline", type=Path)
    calibrate = commands.add_parser("calibrate", help="INT8: ranges, Q/DQ model and TensorRT calibration caches from one run")
    calibrate.add_argument("pipeline", type=Path)
    calibrate.add_argument(
        "--tensorrt",
        action="append",
        default=[],
        metavar="VERSION",
        help="also write a calibration cache for this TensorRT (e.g. 10.3, 8.6.1); repeatable",
    )
    calibrate.add_argument("--out", type=Path, help="folder for the artifacts (default: reports/<pipeline name>/int8)")
    dla = commands.add_parser("dla-report", help="predict which layers land on DLA, and why not (no device needed with --platform)")
    dla.add_argument("source", type=Path, metavar="PIPELINE|MODEL.onnx", help="a pipeline file (its model is prepared first) or an ONNX model")
    where = dla.add_mutually_exclusive_group(required=True)
    where.add_argument("--target", "-t", help="probe this target for its platform, TensorRT and DLA cores")
    where.add_argument("--platform", help="offline: the platform (jetson-agx-orin, jetson-orin-nx, drive-orin, ...); needs --tensorrt")
    dla.add_argument("--tensorrt", metavar="VERSION", help="TensorRT version (e.g. 10.3, 8.6.1); overrides the probe's")
    dla.add_argument("--precision", choices=("int8", "fp16", "fp32"), default="int8", help="the build's precision (default int8)")
    dla.add_argument("--json", type=Path, metavar="FILE", help="also write the report (one entry per ONNX node) as JSON")
    dla.add_argument("--all", action="store_true", help="list every layer, not only those that leave DLA")
    targets = commands.add_parser("targets", help="known targets")
    targets_commands = targets.add_subparsers(dest="targets_command", required=True, metavar="SUBCOMMAND")
    targets_commands.add_parser("list", help="list known targets")
    probe = targets_commands.add_parser("probe", help="print a target's device fingerprint (one round trip)")
    probe.add_argument("target")
    sim = targets_commands.add_parser("sim", help="start a simulated target (real sshd on loopback) and write targets/sim.yaml")
    sim.add_argument("--stop", action="store_true", help="stop the simulated target")
    for name, text in (("rollback", "go back one release on the target"), ("status", "the target's releases and deploy state")):
        command = commands.add_parser(name, help=text)
        command.add_argument("--target", "-t", required=True)
    return parser


def _deploy(args: argparse.Namespace, console: Console) -> int:
    from tools.console import RichProgress, render_fleet, render_report
    from tools.deploy import Deploy
    from tools.fleet import FleetResult

    with RichProgress(console) as progress:
        deploy = Deploy(
            args.pipeline, args.target, frames=args.frames, report_dir=args.report_dir, progress=progress, parallel=args.parallel, canary=args.canary
        )
        result = deploy()
    if isinstance(result, FleetResult):
        render_fleet(console, result)
    else:
        render_report(console, result.report, result.report_dir, result.staged)
    return result.exit_code


def _prepare(args: argparse.Namespace, console: Console) -> int:
    from sdk.spec import load_pipeline
    from tools.prepare import PrepareModel
    from tools.state import cache_dir

    pipeline = load_pipeline(args.pipeline)
    prepare = PrepareModel(pipeline, cache_dir())
    with console.status("preparing model"):
        was_cached = prepare.cached
        artifacts = prepare()
    console.print(("cached: " if was_cached else "prepared: ") + str(artifacts.folder))
    console.print(artifacts.meta_path.read_text().strip())
    return 0


def _calibrate(args: argparse.Namespace, console: Console) -> int:
    import json
    import shutil

    from sdk.spec import load_pipeline
    from tools.accuracy import plot_accuracy, require_passed
    from tools.calibrate import Calibrate, check_accuracy
    from tools.console import RichProgress, render_accuracy
    from tools.prepare import PrepareModel
    from tools.state import cache_dir

    pipeline = load_pipeline(args.pipeline)
    with RichProgress(console) as progress:
        model = PrepareModel(pipeline, cache_dir())()
        artifacts = Calibrate(pipeline, model, cache_dir(), progress)()
        accuracy = check_accuracy(pipeline, model, artifacts, progress)
    out = (args.out or Path("reports") / pipeline.spec.name / "int8").resolve()
    out.mkdir(parents=True, exist_ok=True)
    (out / "accuracy.json").write_text(json.dumps(accuracy.as_dict(), indent=2) + "\n")
    plot_accuracy(accuracy, out / "accuracy.png")
    render_accuracy(console, accuracy)
    require_passed(accuracy, str(pipeline.path))  # refused: no INT8 artifact is published
    shutil.copyfile(artifacts.qdq_model, out / artifacts.qdq_model.name)
    shutil.copyfile(artifacts.ranges, out / artifacts.ranges.name)
    for version in args.tensorrt:
        (out / f"calibration-trt{version}.cache").write_text(artifacts.trt_cache(version))
    amax = artifacts.amax()
    console.print(f"{len(amax)} tensors calibrated ({pipeline.spec.calibration.method}); artifacts in {out}")
    return 0


def _dla_report(args: argparse.Namespace, console: Console) -> int:
    from sdk.engine.platforms import TensorRTVersion
    from sdk.errors import ConfigError
    from tools.dla.render import render_dla_report, write_dla_json
    from tools.dla.report import DlaAnalysis, TargetFacts, target_facts

    if args.platform is not None:
        if not args.tensorrt:
            raise ConfigError(
                "--platform needs --tensorrt (the version the engine will be built with)", hint="e.g. --platform jetson-agx-orin --tensorrt 10.3"
            )
        facts = TargetFacts(args.platform, TensorRTVersion.parse(args.tensorrt))
    else:
        facts = target_facts(args.target, args.tensorrt)
    analysis = DlaAnalysis(args.source, facts, args.precision)
    with console.status("analysing"):
        report = analysis()
    render_dla_report(console, report, every_layer=args.all)
    if args.json:
        write_dla_json(report, args.json)
        console.print(f"JSON: {args.json}")
    analysis.check_contract(report)  # after the table: the numbers that break the contract are on screen
    return 0


def _targets(args: argparse.Namespace, console: Console) -> int:
    import json

    from tools.targets import known_targets, resolve_target, targets_dir

    if args.targets_command == "list":
        for name in known_targets():
            console.print(name)
    elif args.targets_command == "probe":
        from tools.remote import probe

        console.print_json(json.dumps(probe(resolve_target(args.target))))
    elif args.targets_command == "sim":
        from tools.state import state_dir
        from tools.targets.sim import SimServer

        server = SimServer(state_dir() / "sim")
        server.stop()
        if args.stop:
            console.print("simulated target stopped")
            return 0
        server.start()
        path = server.write_target(targets_dir() / "sim.yaml")
        console.print(f"simulated target on 127.0.0.1:{server.port} (sshd pid {server.pid}); target file {path}")
        console.print("deploy to it with: deploy --target sim PIPELINE; stop it with: sdk targets sim --stop")
    return 0


def _store_command(args: argparse.Namespace, console: Console) -> int:
    import json

    from tools.remote import store_command
    from tools.targets import resolve_target

    result = store_command(resolve_target(args.target), args.command)
    console.print_json(json.dumps(result))
    return 0


HANDLERS = {
    "deploy": _deploy,
    "prepare": _prepare,
    "calibrate": _calibrate,
    "dla-report": _dla_report,
    "targets": _targets,
    "rollback": _store_command,
    "status": _store_command,
}


def run(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)  # usage errors exit 2 here
    console = Console()
    errors = Console(stderr=True)
    try:
        return HANDLERS[args.command](args, console)
    except SdkError as exc:
        if os.environ.get("SDK_DEBUG"):
            raise
        errors.print(f"[bold red]error:[/] {exc.message}", highlight=False, markup=True, soft_wrap=True)
        errors.print(f"[bold]hint:[/] {exc.hint}", highlight=False, soft_wrap=True)
        return exc.exit_code
    except KeyboardInterrupt:
        errors.print("error: interrupted")
        return 130


def main() -> None:
    sys.exit(run(sys.argv[1:]))


def deploy_main() -> None:
    """`deploy ...` is `sdk deploy ...`."""
    sys.exit(run(["deploy", *sys.argv[1:]]))


__all__ = ["build_parser", "deploy_main", "main", "run"]
