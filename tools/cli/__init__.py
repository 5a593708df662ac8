"""The host command line: `sdk ...` and its shortcut `deploy ...`.

The one error boundary of the host: an SdkError becomes one `error:` line and one `hint:`
line on stderr with its exit code, never a traceback (set SDK_DEBUG=1 to see one).
Exit codes: 0 PASS, 1 user error, 2 usage, 3 budget FAIL, 4 INCONCLUSIVE.
"""

from __future__ import annotations

import os
import sys
from functools import partial
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from sdk.errors import SdkError
from tools.cli.models import (
    calibrate_command,
    check_command,
    compare_command,
    dla_report_command,
    history_command,
    init_command,
    optimize_command,
    predict_command,
    prepare_command,
    profile_command,
)
from tools.cli.parser import build_parser
from tools.cli.targets import deploy_command, export_command, selftest_command, service_command, store_command, targets_command, validate_command
from tools.evaluate.command import evaluate_command
from tools.validation.evaluate_targets import detect_on_targets


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
    if path.suffix.lower() == ".onnx":  # `sdk predict MODEL.onnx`
        close = difflib.get_close_matches(path.name, sorted(p.name for p in folder.glob("*.onnx")), n=1) if folder.is_dir() else []
        raise ConfigError(f"{path}: no such ONNX file", hint=f"did you mean {folder / close[0]}?" if close else "check the path")
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


HANDLERS = {
    "deploy": deploy_command,
    "history": history_command,
    "compare": compare_command,
    "optimize": optimize_command,
    "evaluate": partial(evaluate_command, on_targets=detect_on_targets),  # a --target other than local runs on the fleet
    "validate": validate_command,
    "selftest": selftest_command,
    "init": init_command,
    "check": check_command,
    "prepare": prepare_command,
    "calibrate": calibrate_command,
    "dla-report": dla_report_command,
    "profile": profile_command,
    "predict": predict_command,
    "targets": targets_command,
    "export": export_command,
    "rollback": store_command,
    "status": store_command,
    "start": service_command,
    "stop": service_command,
    "logs": service_command,
}


def run(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)  # usage errors exit 2 here
    console = Console(highlight=False)  # no colours guessed into prose (numbers, words); tables and JSON style themselves
    console.soft_wrap = not console.is_terminal  # piped: whole lines for logs and grep, never wrapped at 80 columns
    errors = Console(stderr=True, highlight=False)
    try:
        _check_frames(getattr(args, "frames", None))  # before anything is prepared or sent
        _check_pipeline_path(getattr(args, "pipeline", None))
        from tools.history.hook import mlflow_uri

        with mlflow_uri(getattr(args, "mlflow", None)):  # each run this command finishes is logged there too
            return HANDLERS[args.command](args, console)
    except SdkError as exc:
        if os.environ.get("SDK_DEBUG"):
            raise
        errors.print(f"[bold red]error:[/] {escape(exc.message)}", highlight=False, markup=True, soft_wrap=True)
        errors.print(f"[bold]hint:[/] {escape(exc.hint)}", highlight=False, soft_wrap=True)
        return exc.exit_code
    except KeyboardInterrupt:
        errors.print("error: interrupted", highlight=False, soft_wrap=True)
        errors.print(f"hint: {interrupted_hint(args)}", highlight=False, soft_wrap=True)
        return 130


def interrupted_hint(args) -> str:
    """What an interrupted command left on its target, and how to see it."""
    target = getattr(args, "target", None)
    if args.command in ("deploy", "validate", "rollback", "start", "stop", "selftest") and target:
        return (
            f"nothing half-done runs on {target}: a trial the device had begun is rolled back by the device itself (its own "
            f"deadline, or the next start or deploy), and the committed release stays what starts; see it with: sdk status --target {target}"
        )
    return "nothing was left half-written: outputs are published whole or not at all; run the command again"


def main() -> None:
    sys.exit(run(sys.argv[1:]))


def deploy_main() -> None:
    """`deploy ...` is `sdk deploy ...`."""
    sys.exit(run(["deploy", *sys.argv[1:]]))


__all__ = ["build_parser", "deploy_main", "main", "run"]
