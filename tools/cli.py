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
from rich.markup import escape

from sdk.errors import SdkError


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value


def _whole(text: str) -> int:
    """A whole number; its range is checked after parsing, as a user error (exit 1) naming the range."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None


def _check_pipeline_path(path: Path | None) -> None:
    """A pipeline argument that is a folder or does not exist: one error naming it, with the files it could mean."""
    import difflib

    from sdk.errors import ConfigError

    if path is None or path.is_file():
        return
    if path.is_dir():
        files = sorted(p.name for p in path.glob("*.yaml"))
        hint = f"name one of its files, e.g. {path / files[0]}" if files else "give a pipeline file (YAML), e.g. pipelines/pedestrian.yaml"
        raise ConfigError(f"{path} is a folder, not a pipeline file", hint=hint)
    folder = path.parent
    close = difflib.get_close_matches(path.name, sorted(p.name for p in folder.glob("*.yaml")), n=1) if folder.is_dir() else []
    hint = f"did you mean {folder / close[0]}?" if close else "check the path; pipelines/pedestrian.yaml is the example"
    raise ConfigError(f"{path}: no such pipeline file", hint=hint)


def _check_frames(frames: int | None) -> None:
    from sdk.errors import ConfigError
    from sdk.spec.bounds import MAX_REPLAY_FRAMES, REPLAY_FRAMES_HINT, replay_frames_problem

    if frames is None:
        return
    if frames < 1:
        raise ConfigError(f"--frames: {frames} is out of range; allowed: 1 to {MAX_REPLAY_FRAMES}", hint="give a positive number of frames")
    problem = replay_frames_problem(frames)
    if problem is not None:
        raise ConfigError(f"--frames: {problem}", hint=REPLAY_FRAMES_HINT.replace("replay.frames", "--frames"))


def _add_deploy_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("pipeline", type=Path, help="pipeline file (YAML)")
    parser.add_argument("--target", "-t", required=True, help="target name: `local` or one from targets/")
    parser.add_argument("--frames", type=_whole, help="stop after N frames (default: the pipeline's replay setting)")
    parser.add_argument(
        "--report-dir", type=Path, help="an empty folder for this run's report (default: a new reports/<pipeline>/<UTC time>-<target>-deploy/)"
    )
    parser.add_argument("--force", action="store_true", help="empty --report-dir first when it already holds files")
    parser.add_argument("--parallel", type=_positive, default=4, help="fleets: targets deployed at once (default 4)")
    parser.add_argument("--canary", action="store_true", help="fleets: the first target must pass before the others start")
    parser.add_argument("--sign-key", type=Path, help="Ed25519 private key that signs the release manifest (default: the target file's sign_key)")
    _add_mlflow_argument(parser)


def _add_mlflow_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--mlflow", metavar="URI", help="also log the run to this MLflow tracking server (default: $SDK_MLFLOW_URI; mlflow extra)")


def _port(text: str) -> int:
    value = _whole(text)
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a TCP port (1 to 65535)")
    return value


def _add_targets_add(targets_commands) -> None:
    from tools.targets.add import DEFAULT_PLATFORM
    from tools.targets.spec import PLATFORMS

    add = targets_commands.add_parser(
        "add", help="write targets/NAME.yaml for a device: fetches its SSH host key once, shows the fingerprint, pins it once confirmed"
    )
    add.add_argument("name", help="the new target's name, e.g. orin-01 (letters, digits, '-', '_')")
    add.add_argument("--host", required=True, help="the device's address or host name")
    add.add_argument("--user", required=True, help="the login on the device (keys only)")
    add.add_argument("--key", required=True, metavar="KEY_FILE", help="the private key on this machine that the device accepts")
    add.add_argument("--platform", choices=PLATFORMS, default=DEFAULT_PLATFORM, help=f"what the device is (default {DEFAULT_PLATFORM})")
    add.add_argument("--port", type=_port, default=22, help="the device's SSH port (default 22)")
    add.add_argument("--remote-root", metavar="DIR", help="the folder on the device for releases (default: ~USER/perception)")
    add.add_argument(
        "--fingerprint", metavar="SHA256:...", help="for scripts: the host key's fingerprint, verified out of band; a different key is refused"
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sdk", description="Deploy perception pipelines to NVIDIA vehicle computers.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    deploy = commands.add_parser("deploy", help="prepare, stage, run and judge a pipeline on a target")
    _add_deploy_arguments(deploy)
    init = commands.add_parser("init", help="write a commented pipeline file for an ONNX model (its family recognised from its tensors)")
    init.add_argument("model", type=Path, metavar="MODEL.onnx", help="the model; the pipeline file is written beside it")
    init.add_argument("--source", metavar="URI", help="the frames (file://clip.mp4, images://dir, v4l2:///dev/video0; default: synthetic frames)")
    init.add_argument(
        "--output", "-o", type=Path, metavar="PIPELINE.yaml", help="where to write (default: MODEL.yaml beside the model; never overwritten)"
    )
    prepare = commands.add_parser("prepare", help="prepare the model (graph cut, static shapes, constants)")
    prepare.add_argument("pipeline", type=Path, help="pipeline file (YAML) whose model to prepare")
    calibrate = commands.add_parser("calibrate", help="INT8: ranges, Q/DQ model and TensorRT calibration caches from one run")
    calibrate.add_argument("pipeline", type=Path, help="pipeline file (YAML): its model, its calibration frames and settings")
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
    profile = commands.add_parser("profile", help="per-layer times of the model on a target's backend, beside the model's prediction")
    profile.add_argument("pipeline", type=Path, help="pipeline file (YAML): its model (local), or the current release running it (a vehicle)")
    profile.add_argument("--target", "-t", required=True, help="target name: `local` or one from targets/")
    profile.add_argument("--frames", type=_whole, help="profiled frames (default 50; a profile run never feeds a verdict)")
    profile.add_argument("--json", type=Path, metavar="OUT", help="also write the report (layers[], total, bottlenecks) to this file")
    profile.add_argument(
        "--report-dir", type=Path, help="folder for report.json and report.html (default: reports/<pipeline>/<time>-<target>-profile/)"
    )
    predict = commands.add_parser("predict", help="predict each layer's and the whole model's time on a platform (no device needed)")
    predict.add_argument("pipeline", type=Path, help="pipeline file (YAML) whose prepared model to predict")
    predict.add_argument(
        "--platform", required=True, help="host (this machine, measured once), or a module: jetson-agx-orin-64gb, jetson-orin-nano-8gb, ..."
    )
    predict.add_argument("--precision", choices=("fp32", "fp16", "int8"), help="TensorRT's precision (default: the pipeline's, FP16 for fp32)")
    predict.add_argument("--dla", action="store_true", help="run on a DLA core where the DLA placement prediction puts each layer")
    predict.add_argument("--power-mode", metavar="MODE", help="the module's nvpmodel mode (default: its default mode; see docs/platforms.md)")
    predict.add_argument("--tensorrt", metavar="VERSION", help="with --dla: the TensorRT whose DLA rules apply (default 10.3)")
    predict.add_argument("--json", type=Path, metavar="OUT", help="also write the prediction as JSON")
    targets = commands.add_parser("targets", help="known targets")
    targets_commands = targets.add_subparsers(dest="targets_command", required=True, metavar="SUBCOMMAND")
    targets_commands.add_parser("list", help="list known targets")
    probe = targets_commands.add_parser("probe", help="print a target's device fingerprint (one round trip)")
    probe.add_argument("target", help="a target name (`sdk targets list`)")
    sim = targets_commands.add_parser("sim", help="start a simulated target (real sshd on loopback) and write targets/sim.yaml")
    sim.add_argument("--stop", action="store_true", help="stop the simulated target")
    _add_targets_add(targets_commands)
    check = targets_commands.add_parser("check", help="connect, probe and list what would block a deploy (exit 0: nothing blocks, 1: something does)")
    check.add_argument("target", help="a target name (`sdk targets list`)")
    trust = targets_commands.add_parser("trust-key", help="make the target accept only releases signed by this Ed25519 key")
    trust.add_argument("target", help="a target name (`sdk targets list`)")
    trust.add_argument("key", type=Path, nargs="?", help="the public key (PEM or OpenSSH .pub) to trust")
    trust.add_argument("--signed-by", type=Path, help="the private key of a key the device trusts now (default: the target's sign_key)")
    trust.add_argument("--revoke", metavar="FINGERPRINT", help="revoke this key (SHA256:...) instead; its releases are refused from the next start")
    export = commands.add_parser("export", help="a release as a Mender Artifact, and the Mender Update Module that installs it")
    export.add_argument("pipeline", type=Path, nargs="?", help="pipeline file (YAML); needs --target and --mender")
    export.add_argument("--target", "-t", help="the target file the release is built for (platform, device type, sign_key, store)")
    export.add_argument("--mender", type=Path, metavar="OUT.mender", help="write the release as this Mender Artifact")
    export.add_argument("--sign-key", type=Path, metavar="KEY", help="sign the artifact with this ECDSA P-256 or RSA key (mender-artifact -k)")
    export.add_argument("--mender-module", type=Path, metavar="DIR", help="write the Update Module DIR/perception-release and its .conf")
    export.add_argument("--root", help="--mender-module: the device's release store (default: the target's remote_root)")
    export.add_argument("--python", help="--mender-module: the device's Python, an absolute path (default: the target's, or /usr/bin/python3)")
    selftest = commands.add_parser(
        "selftest", help="the hardware checks (CUDA, TensorRT engine, CUDA preprocessing and pipeline) and the gpu-marked tests, on the target"
    )
    selftest.add_argument("--target", "-t", required=True, help="the target whose current release to check")
    selftest.add_argument("--report-dir", type=Path, help="write selftest.json and the gpu tests' junit.xml here")
    selftest.add_argument(
        "--tests-deadline", type=_positive, default=900, metavar="S", help="seconds the gpu tests may take on the device (default 900)"
    )
    _add_mlflow_argument(selftest)
    validate = commands.add_parser("validate", help="latency and accuracy acceptance run on the target's current release")
    validate.add_argument("pipeline", type=Path, help="pipeline file (YAML): the one the current release runs")
    validate.add_argument("--target", "-t", required=True, help="the target whose current release to measure")
    validate.add_argument("--frames", type=_whole, help="stop after N frames (default: the pipeline's replay setting)")
    validate.add_argument(
        "--report-dir", type=Path, help="an empty folder for this run's report (default: a new reports/<pipeline>/<UTC time>-<target>-validate/)"
    )
    validate.add_argument("--force", action="store_true", help="empty --report-dir first when it already holds files")
    validate.add_argument("--repeat", type=_positive, help="runs on the same replay, outputs compared (default 1, or 2 with budgets.determinism)")
    validate.add_argument("--stress", help="interference on the device during the run, e.g. cpu=2,memory=1,memory_mb=256")
    validate.add_argument("--deploy", action="store_true", help="deploy the pipeline first (nothing is sent when it is current)")
    validate.add_argument("--parallel", type=_positive, default=4, help="fleets: targets measured at once (default 4)")
    validate.add_argument("--canary", action="store_true", help="fleets: the first target must pass before the others start")
    _add_mlflow_argument(validate)
    for name, text in (
        ("rollback", "go back one release on the target"),
        ("status", "the target's releases, deploy state and service health"),
        ("start", "run the committed release, verified, as a service (supervised; waits for READY)"),
        ("stop", "stop the service (SIGTERM, bounded wait)"),
        ("logs", "the service's log"),
    ):
        command = commands.add_parser(name, help=text)
        command.add_argument("--target", "-t", required=True, help="a target name (`sdk targets list`)")
    commands.choices["logs"].add_argument("--lines", type=_positive, default=100, help="the last N lines (default 100)")
    from tools.history.commands import add_parsers

    add_parsers(commands)  # history, compare
    from tools.optimize.command import add_parsers as add_optimize

    add_optimize(commands)  # optimize
    return parser


def _deploy(args: argparse.Namespace, console: Console) -> int:
    from sdk.spec import load_pipeline
    from tools.console import RichProgress, render_fleet, render_report
    from tools.deploy import Deploy, default_report_dir
    from tools.fleet import FleetResult
    from tools.validation.report_dirs import check_report_dir, empty_report_dir, update_latest

    # The report folder is settled before anything runs: a run of its own, or an empty named one.
    pipeline = load_pipeline(args.pipeline)  # a bad file is refused before --force empties anything
    if args.report_dir is None:
        report_dir = default_report_dir(pipeline, args.target, "deploy").resolve()
    else:
        report_dir = check_report_dir(args.report_dir, args.force)
        if args.force:
            empty_report_dir(report_dir)
    with RichProgress(console) as progress:
        deploy = Deploy(
            args.pipeline,
            args.target,
            frames=args.frames,
            report_dir=report_dir,
            progress=progress,
            parallel=args.parallel,
            canary=args.canary,
            sign_key=args.sign_key,
        )
        result = deploy()
    if args.report_dir is None:
        update_latest(report_dir)
    if isinstance(result, FleetResult):
        render_fleet(console, result)
    else:
        from tools.perf.summary import render_top_layers
        from tools.targets import resolve_target

        render_report(console, result.report, result.report_dir, result.staged)
        render_top_layers(console, result, resolve_target(args.target))
    return result.exit_code


def _validate(args: argparse.Namespace, console: Console) -> int:
    from tools.console import RichProgress, render_fleet, render_report
    from tools.fleet import FleetResult
    from tools.validation.validate import Validate

    with RichProgress(console) as progress:
        validate = Validate(
            args.pipeline,
            args.target,
            frames=args.frames,
            report_dir=args.report_dir,
            repeat=args.repeat,
            stress=args.stress,
            deploy=args.deploy,
            progress=progress,
            force=args.force,
            parallel=args.parallel,
            canary=args.canary,
        )
        result = validate()
    if isinstance(result, FleetResult):
        render_fleet(console, result)
    else:
        render_report(console, result.report, result.report_dir, result.staged)
    return result.exit_code


def _init(args: argparse.Namespace, console: Console) -> int:
    from tools.init_pipeline import init_pipeline

    result = init_pipeline(args.model, source=args.source, output=args.output)
    console.print(f"{result.recognised.summary}", highlight=False, markup=False)
    console.print(f"wrote {result.path}", highlight=False, markup=False)
    if result.fill_in:
        console.print(
            f"fill in {len(result.fill_in)} value(s) the model cannot tell; the file is refused until they are:", highlight=False, markup=False
        )
        for key, why in result.fill_in:
            console.print(f"  {key}: {why}", highlight=False, markup=False)
    else:
        console.print(f"run it: deploy --target local {result.path} --frames 30", highlight=False, markup=False)
    return 0


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

    from sdk.engine.platforms import known_tensorrt
    from sdk.spec import load_pipeline
    from tools.console import RichProgress, render_accuracy
    from tools.int8 import Int8ForDeploy, trt_cache_file
    from tools.prepare import PrepareModel
    from tools.state import cache_dir

    for version in args.tensorrt:
        known_tensorrt(version)  # before anything is calibrated: one error line listing the known releases
    pipeline = load_pipeline(args.pipeline)
    out = (args.out or Path("reports") / pipeline.spec.name / "int8").resolve()
    out.mkdir(parents=True, exist_ok=True)
    with RichProgress(console) as progress:
        model = PrepareModel(pipeline, cache_dir())()
        step = Int8ForDeploy(pipeline, model, cache_dir(), progress)
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


def _profile(args: argparse.Namespace, console: Console) -> int:
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


def _predict(args: argparse.Namespace, console: Console) -> int:
    from tools.perf.report import short_name, write_json
    from tools.perf.run import predict_pipeline

    if args.tensorrt:
        from sdk.engine.platforms import known_tensorrt

        known_tensorrt(args.tensorrt)
    report = predict_pipeline(args.pipeline, args.platform, args.precision, args.dla, args.tensorrt, args.power_mode)
    if args.json:
        write_json(report, args.json)
    total = report["total"]
    console.print(
        f"{report['pipeline']} on {report['platform']}{' (' + report['power_mode'] + ')' if report.get('power_mode') else ''}, "
        f"{report['backend']} {report['precision']}: {total['predicted_ms']:.3f} ms predicted"
        + (f" ({total['transitions_ms']:.3f} ms in GPU<->DLA transitions)" if total["transitions_ms"] else ""),
        highlight=False,
    )
    for number, item in enumerate(report["bottlenecks"][:5], 1):
        text = f"{number}. {short_name(item['name'], 70)} ({item['op']}) {item['ms']:.3f} ms, {item['share']:.0%}, {item['bound']}-bound"
        console.print(text, highlight=False, markup=False)
    for note in report["notes"]:
        console.print(f"note: {note}", highlight=False, markup=False)
    if args.json:
        sys.stderr.write(f"JSON: {args.json}\n")
    return 0


def _dla_report(args: argparse.Namespace, console: Console) -> int:
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
    elif args.targets_command == "add":
        return _targets_add(args, console)
    elif args.targets_command == "check":
        return _targets_check(args, console)
    elif args.targets_command == "trust-key":
        from tools.trust import trust_key

        if (args.key is None) == (args.revoke is None):
            from sdk.errors import ConfigError

            raise ConfigError("trust-key needs a key to trust, or --revoke FINGERPRINT (one of them)", hint="sdk targets trust-key T KEY.pub")
        result = trust_key(resolve_target(args.target), args.key, args.signed_by, args.revoke)
        keys = ", ".join(f"{name} {fp}".strip() for fp, name in result["keys"].items())
        what = f"revoked {result['revoked_key']}" if args.revoke else f"trusts {result['trusted']}"
        console.print(f"{args.target} {what}; it accepts only releases signed by: {keys} ({result['source']})", highlight=False)
    elif args.targets_command == "sim":
        from sdk.errors import TargetError
        from tools.state import state_dir
        from tools.targets.sim import SimServer, is_sim_file

        server = SimServer(state_dir() / "sim")
        path = targets_dir() / "sim.yaml"
        if path.exists() and not is_sim_file(path):
            raise TargetError(f"{path} is not a simulated target's file; not touched", hint="rename that target, or set SDK_TARGETS_DIR")
        server.stop()
        if args.stop:
            path.unlink(missing_ok=True)  # the target file names a server that is gone
            console.print(f"simulated target stopped; {path} removed", markup=False, soft_wrap=True)
            return 0
        server.start()
        path = server.write_target(path)
        console.print(f"simulated target on 127.0.0.1:{server.port} (sshd pid {server.pid}); target file {path}")
        console.print("deploy to it with: deploy --target sim PIPELINE; stop it with: sdk targets sim --stop")
    return 0


def _export(args: argparse.Namespace, console: Console) -> int:
    from sdk.errors import ConfigError

    if args.pipeline is None and args.mender_module is None:
        raise ConfigError("nothing to export", hint="give PIPELINE --target T --mender OUT.mender, or --mender-module DIR (or both)")
    if args.pipeline is not None:
        from tools.console import RichProgress
        from tools.export import ExportMender

        if args.target is None or args.mender is None:
            raise ConfigError("exporting a pipeline needs --target and --mender", hint="sdk export PIPELINE --target T --mender OUT.mender")
        with RichProgress(console) as progress:
            result = ExportMender(args.pipeline, args.target, args.mender, sign_key=args.sign_key, progress=progress)()
        signed = ("artifact signed" if result.artifact_signed else "artifact unsigned") + (", manifest signed" if result.manifest_signed else "")
        console.print(
            f"release {result.release_id} ({result.files} files, {result.objects} objects) as {result.path}: artifact {result.artifact_name}, "
            f"device type {result.device_type}, {signed}",
            highlight=False,
        )
    if args.mender_module is not None:
        from tools.export import MODULE_DIR, module_settings, write_module

        settings = module_settings(args.target, args.root, args.python)
        module, config = write_module(args.mender_module, **settings)
        console.print(f"update module {module} (runs {settings['python']}); install it as {MODULE_DIR}/{module.name}", highlight=False)
        console.print(f"its configuration {config} (store {settings['root']}); install it as /etc/mender/{config.name}", highlight=False)
    return 0


def _targets_add(args: argparse.Namespace, console: Console) -> int:
    from tools.targets.add import AddTarget

    def show(key) -> None:
        # Never wrapped: a fingerprint is compared character by character.
        console.print(f"host key of {args.host}:{args.port}: {key.key_type} {key.fingerprint}", markup=False, highlight=False, soft_wrap=True)
        console.print("compare it with the device's own (on it: ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub)", markup=False, soft_wrap=True)

    def confirm(key) -> bool:
        try:
            return input(f"pin this key for {args.name}? [y/N] ").strip().lower() in ("y", "yes")
        except EOFError:
            return False

    on_terminal = sys.stdin is not None and sys.stdin.isatty()
    add = AddTarget(args.name, args.host, args.user, args.key, args.platform, args.port, args.remote_root, args.fingerprint)
    add.confirm, add.on_key = (confirm if on_terminal else None), show
    added = add()
    console.print(f"wrote {added.path} (host key {added.host_key.fingerprint} pinned in {added.known_hosts.name})", markup=False, soft_wrap=True)
    console.print(f"next: sdk targets check {args.name}", markup=False, highlight=False, soft_wrap=True)
    return 0


def _targets_check(args: argparse.Namespace, console: Console) -> int:
    from rich.text import Text

    from tools.targets import resolve_target
    from tools.targets.check import BLOCKED, check_target

    style = {"ok": "green", "note": "cyan", "warn": "yellow", BLOCKED: "bold red"}
    result = check_target(resolve_target(args.target))
    console.print(Text(f"{result.target} ({result.where})", style="bold"), soft_wrap=True)
    for finding in result.findings:
        console.print(Text.assemble("  ", (f"{finding.status:<8}", style[finding.status]), f" {finding.what}: {finding.detail}"), soft_wrap=True)
        if finding.hint and finding.status != "ok":
            console.print(Text(f"{'':11}hint: {finding.hint}"), soft_wrap=True)
    blocking = result.blocking
    if not blocking:
        console.print(Text(f"nothing blocks a deploy to {result.target}", style="bold green"), soft_wrap=True)
        return 0
    what = ", ".join(f.what for f in blocking)
    console.print(Text(f"{len(blocking)} problem(s) block a deploy to {result.target}: {what}", style="bold red"), soft_wrap=True)
    return 1


def _store_command(args: argparse.Namespace, console: Console) -> int:
    import json

    from tools.remote import store_command
    from tools.targets import resolve_target

    result = store_command(resolve_target(args.target), args.command)
    console.print_json(json.dumps(result))
    return 0


def _service_command(args: argparse.Namespace, console: Console) -> int:
    import json

    from tools.remote import service_command
    from tools.targets import resolve_target

    extra = ["--lines", str(args.lines)] if args.command == "logs" else []
    result = service_command(resolve_target(args.target), args.command, *extra)
    if args.command == "logs":
        for line in result["lines"]:
            console.print(line, highlight=False, markup=False)
    else:
        if result.get("plan"):  # what the service will do, and when it ends (a replay ends with its clip)
            sys.stderr.write(f"{args.target}: {result['plan']}\n")
        for note in result.get("notes") or ():  # damage found, a repair that waits, a fallback taken
            sys.stderr.write(f"{args.target}: note: {note}\n")
        console.print_json(json.dumps(result))
    return 0


def _selftest(args: argparse.Namespace, console: Console) -> int:
    from rich.table import Table

    from sdk.errors import EXIT_BUDGET_FAIL, EXIT_INCONCLUSIVE, EXIT_PASS
    from tools.remote import selftest
    from tools.targets import resolve_target

    result = selftest(resolve_target(args.target), deadline_s=args.tests_deadline, report_dir=args.report_dir)
    from tools.history.hook import finished

    finished(args.report_dir, "selftest", result=None if args.report_dir is not None else {"target": args.target, **result})
    table = Table(title=f"selftest of release {result['release']} on {args.target}")
    for column in ("check", "status", "detail"):
        table.add_column(column)
    style = {"PASS": "bold green", "FAIL": "bold red", "SKIP": "yellow", "N/A": "dim"}
    for check in result["checks"]:
        table.add_row(check["name"], f"[{style[check['status']]}]{check['status']}[/]", check["detail"], end_section=check["name"] == "gpu_tests")
        outcome_style = {"passed": "green", "failed": "bold red", "error": "bold red", "skipped": "yellow"}
        for test in check.get("tests", []):  # the gpu tests, one row each
            table.add_row(f"  {test['name']}", f"[{outcome_style[test['outcome']]}]{test['outcome']}[/]", test["reason"])
    console.print(table)
    if args.report_dir is not None:
        sys.stderr.write(f"report: {args.report_dir}\n")
    statuses = {check["status"] for check in result["checks"]}
    if "FAIL" in statuses:
        return EXIT_BUDGET_FAIL
    return EXIT_INCONCLUSIVE if "SKIP" in statuses else EXIT_PASS  # a check skipped for lack of hardware proves nothing


def _history(args: argparse.Namespace, console: Console) -> int:
    from tools.history.commands import history

    return history(args, console)


def _compare(args: argparse.Namespace, console: Console) -> int:
    from tools.history.commands import compare

    return compare(args, console)


HANDLERS = {
    "deploy": _deploy,
    "history": _history,
    "compare": _compare,
    "validate": _validate,
    "selftest": _selftest,
    "init": _init,
    "prepare": _prepare,
    "calibrate": _calibrate,
    "dla-report": _dla_report,
    "profile": _profile,
    "predict": _predict,
    "targets": _targets,
    "export": _export,
    "rollback": _store_command,
    "status": _store_command,
    "start": _service_command,
    "stop": _service_command,
    "logs": _service_command,
}


def run(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)  # usage errors exit 2 here
    console = Console()
    console.soft_wrap = not console.is_terminal  # piped: whole lines for logs and grep, never wrapped at 80 columns
    errors = Console(stderr=True)
    try:
        _check_frames(getattr(args, "frames", None))  # before anything is prepared or sent
        _check_pipeline_path(getattr(args, "pipeline", None))
        from tools.history.hook import mlflow_uri

        with mlflow_uri(getattr(args, "mlflow", None)):  # each run this command finishes is logged there too
            return HANDLERS.get(args.command, getattr(args, "handler", None))(args, console)
    except SdkError as exc:
        if os.environ.get("SDK_DEBUG"):
            raise
        errors.print(f"[bold red]error:[/] {escape(exc.message)}", highlight=False, markup=True, soft_wrap=True)
        errors.print(f"[bold]hint:[/] {escape(exc.hint)}", highlight=False, soft_wrap=True)
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
