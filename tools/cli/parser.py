"""The command line's grammar: every `sdk` command, its arguments and their types (`build_parser`).

The handlers are in `models.py` (what a model needs) and `targets.py` (what a target does); `__init__.py` runs them
behind the host's one error boundary.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value


def whole(text: str) -> int:
    """A whole number; its range is checked after parsing, as a user error (exit 1) naming the range."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None


def _port(text: str) -> int:
    value = whole(text)
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a TCP port (1 to 65535)")
    return value


def _add_deploy_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("pipeline", type=Path, help="pipeline file (YAML)")
    parser.add_argument("--target", "-t", required=True, help="target name: `local` or one from targets/")
    parser.add_argument("--frames", type=whole, help="stop after N frames (default: the pipeline's replay setting)")
    parser.add_argument(
        "--report-dir", type=Path, help="an empty folder for this run's report (default: a new reports/<pipeline>/<UTC time>-<target>-deploy/)"
    )
    parser.add_argument("--force", action="store_true", help="empty --report-dir first when it already holds files")
    parser.add_argument("--parallel", type=positive, default=4, help="fleets: targets deployed at once (default 4)")
    parser.add_argument("--canary", action="store_true", help="fleets: the first target must pass before the others start")
    parser.add_argument("--sign-key", type=Path, help="Ed25519 private key that signs the release manifest (default: the target file's sign_key)")
    parser.add_argument(
        "--live-view",
        type=_port,
        metavar="PORT",
        help="serve the Foxglove live view during the measured run, on the device's 127.0.0.1:PORT unless the pipeline's foxglove sink names a host",
    )
    _add_mlflow_argument(parser)


def _add_mlflow_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--mlflow", metavar="URI", help="also log the run to this MLflow tracking server (default: $SDK_MLFLOW_URI; mlflow extra)")


def _add_targets_add(targets_commands) -> None:
    from tools.connect.add_target import DEFAULT_PLATFORM
    from tools.targets.spec import PLATFORMS

    add = targets_commands.add_parser(
        "add",
        help="write targets/NAME.yaml for a device: fetches its SSH host key once, shows the fingerprint, pins it once confirmed "
        "(without a terminal: --fingerprint)",
    )
    add.add_argument("name", help="the new target's name, e.g. orin-01 (letters, digits, '-', '_')")
    add.add_argument("--host", required=True, help="the device's address or host name")
    add.add_argument("--user", required=True, help="the login on the device (keys only)")
    add.add_argument("--key", required=True, metavar="KEY_FILE", help="the private key on this machine that the device accepts")
    add.add_argument("--platform", choices=PLATFORMS, default=DEFAULT_PLATFORM, help=f"what the device is (default {DEFAULT_PLATFORM})")
    add.add_argument("--port", type=_port, default=22, help="the device's SSH port (default 22)")
    add.add_argument("--remote-root", metavar="DIR", help="the folder on the device for releases (default: ~USER/perception)")
    add.add_argument(
        "--fingerprint",
        metavar="SHA256:...",
        help="the host key's fingerprint, verified out of band; required without a terminal (scripts, CI), where nobody can confirm "
        "the key shown; a different key is refused",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sdk", description="Deploy perception pipelines to NVIDIA vehicle computers.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    deploy = commands.add_parser("deploy", help="prepare, stage, run and judge a pipeline on a target")
    _add_deploy_arguments(deploy)
    _add_model_commands(commands)  # init, check, prepare, calibrate, dla-report, profile, predict
    _add_target_commands(commands)  # targets ..., export
    _add_device_commands(commands)  # selftest, validate, rollback, status, start, stop, logs
    from tools.history.commands import add_parsers

    add_parsers(commands)  # history, compare
    from tools.optimize.command import add_parsers as add_optimize

    add_optimize(commands)  # optimize
    from tools.evaluate.command import add_parsers as add_evaluate

    add_evaluate(commands)  # evaluate
    _describe(parser)
    return parser


def _add_model_commands(commands) -> None:
    """The commands about a model: init, check, prepare, calibrate, dla-report, profile, predict."""
    init = commands.add_parser("init", help="write a commented pipeline file for an ONNX model (its family recognised from its tensors)")
    init.add_argument("model", type=Path, metavar="MODEL.onnx", help="the model; the pipeline file is written beside it")
    init.add_argument("--source", metavar="URI", help="the frames (file://clip.mp4, images://dir, v4l2:///dev/video0; default: synthetic frames)")
    init.add_argument(
        "--output", "-o", type=Path, metavar="PIPELINE.yaml", help="where to write (default: MODEL.yaml beside the model; never overwritten)"
    )
    init.add_argument(
        "--cascade",
        type=Path,
        action="append",
        default=[],
        metavar="MODEL.onnx",
        help="a model run on the crops of the boxes (a text recogniser, a classifier); repeatable",
    )
    check = commands.add_parser("check", help="check a pipeline file without running it: schema, model tensors against the decoder, budgets")
    check.add_argument("pipeline", type=Path, help="pipeline file (YAML)")
    check.add_argument("--target", "-t", help="also what this host can see of the target without connecting (key file, host-key pin)")
    check.add_argument("--frames", type=whole, help="the frames the run will have (--frames of the deploy): are they enough for the budgets?")
    check.add_argument("--labels", type=Path, metavar="LABELS", help="labels `sdk evaluate` will score on: does every model class find a category?")
    check.add_argument("--images", type=Path, metavar="DIR", help="with --labels: the images (COCO, KITTI: a folder; MOTChallenge: the video)")
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
    profile.add_argument("--frames", type=whole, help="profiled frames (default 50; a profile run never feeds a verdict)")
    profile.add_argument("--json", type=Path, metavar="OUT", help="also write the report (layers[], total, bottlenecks) to this file")
    profile.add_argument(
        "--report-dir", type=Path, help="folder for report.json and report.html (default: reports/<pipeline>/<time>-<target>-profile/)"
    )
    predict = commands.add_parser("predict", help="predict each layer's and the whole model's time on a platform (no device needed)")
    predict.add_argument("pipeline", type=Path, metavar="SOURCE",
                         help="a pipeline file (YAML) whose prepared model to predict, or a bare ONNX model file (MODEL.onnx)")  # fmt: skip
    predict.add_argument(
        "--platform", required=True, help="host (this machine, measured once), or a module: jetson-agx-orin-64gb, jetson-orin-nano-8gb, ..."
    )
    predict.add_argument("--precision", choices=("fp32", "fp16", "int8"),
                         help="TensorRT's precision (default: the pipeline's, FP16 for fp32 and for a bare ONNX file)")  # fmt: skip
    predict.add_argument("--dla", action="store_true", help="run on a DLA core where the DLA placement prediction puts each layer")
    predict.add_argument("--power-mode", metavar="MODE",
                         help="the module's nvpmodel mode, by name (MODE_30W) or id (default: the mode it boots in; docs/platforms.md)")  # fmt: skip
    predict.add_argument("--batch", type=whole, metavar="N", help="with a bare ONNX file: its batch dimension (default 1; 1 to 4096)")
    predict.add_argument("--layers", action="store_true", help="print every predicted layer: what it holds, its time, and how it runs")
    predict.add_argument("--tensorrt", metavar="VERSION", help="with --dla: the TensorRT whose DLA rules apply (default 10.3)")
    predict.add_argument("--json", type=Path, metavar="OUT", help="also write the prediction as JSON")


def _add_target_commands(commands) -> None:
    """`sdk targets ...` and `sdk export`."""
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
    export.add_argument(
        "--python", help="--mender-module, --root-tool: the device's Python, an absolute path (default: the target's, or /usr/bin/python3)"
    )
    export.add_argument(
        "--root-tool", type=Path, metavar="DIR", help="write root's own copy of the SDK, DIR/perception-sdk-root, for root's steps on a device"
    )


def _add_device_commands(commands) -> None:
    """The commands that act on a target's current release: selftest, validate, and the store and service ones."""
    selftest = commands.add_parser(
        "selftest", help="the hardware checks (CUDA, TensorRT engine, CUDA preprocessing and pipeline) and the gpu-marked tests, on the target"
    )
    selftest.add_argument("--target", "-t", required=True, help="the target whose current release to check")
    selftest.add_argument("--report-dir", type=Path, help="write selftest.json and the gpu tests' junit.xml here")
    selftest.add_argument(
        "--tests-deadline", type=positive, default=900, metavar="S", help="seconds the gpu tests may take on the device (default 900)"
    )
    _add_mlflow_argument(selftest)
    validate = commands.add_parser("validate", help="latency and accuracy acceptance run on the target's current release")
    validate.add_argument("pipeline", type=Path, help="pipeline file (YAML): the one the current release runs")
    validate.add_argument("--target", "-t", required=True, help="the target whose current release to measure")
    validate.add_argument("--frames", type=whole, help="stop after N frames (default: the pipeline's replay setting)")
    validate.add_argument(
        "--report-dir", type=Path, help="an empty folder for this run's report (default: a new reports/<pipeline>/<UTC time>-<target>-validate/)"
    )
    validate.add_argument("--force", action="store_true", help="empty --report-dir first when it already holds files")
    validate.add_argument("--repeat", type=positive, help="runs on the same replay, outputs compared (default 1, or 2 with budgets.determinism)")
    validate.add_argument("--stress", help="interference on the device during the run, e.g. cpu=2,memory=1,memory_mb=256")
    validate.add_argument("--deploy", action="store_true", help="deploy the pipeline first (nothing is sent when it is current)")
    validate.add_argument("--parallel", type=positive, default=4, help="fleets: targets measured at once (default 4)")
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
    for name in ("status", "rollback", "start", "stop"):
        commands.choices[name].add_argument("--json", action="store_true", help="print the target's whole answer as JSON")
    commands.choices["logs"].add_argument("--lines", type=positive, default=100, help="the last N lines (default 100)")


def _describe(parser: argparse.ArgumentParser) -> None:
    """Every subcommand's own --help page opens with its one line from the command list (argparse shows it only there)."""
    for action in parser._subparsers._group_actions if parser._subparsers else ():
        for listed in action._choices_actions:
            sub = action.choices[listed.dest]
            if sub.description is None and listed.help:
                sub.description = listed.help[0].upper() + listed.help[1:] + "."
            _describe(sub)


__all__ = ["build_parser", "positive", "whole"]
