"""The command line of `sdk evaluate PIPELINE --labels LABELS [--images DIR] [--target T] [--shards N] [--ray [ADDRESS]]
[--allow-partial] [--json FILE] [--report-dir DIR] [--force]` (registered by tools/cli/parser.py). Results on stdout, progress on stderr; the exit
code is the verdict's (0 PASS, 3 FAIL, 4 INCONCLUSIVE, which includes "no budget on labels"), 1 for an error."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console

EXIT_CODES = {"PASS": 0, "FAIL": 3, "INCONCLUSIVE": 4}


def add_parsers(commands) -> None:
    evaluate = commands.add_parser(
        "evaluate",
        help="the model's accuracy against labelled images (COCO JSON, a YOLO dataset, KITTI, MOTChallenge): mAP, per class, intervals, budgets",
    )
    evaluate.add_argument("pipeline", type=Path, help="pipeline file (YAML): its model, preprocessing, decoder and `evaluation` settings")
    evaluate.add_argument(
        "--labels",
        type=Path,
        required=True,
        metavar="LABELS",
        help="COCO detection JSON (instances_*.json), an Ultralytics dataset YAML, a KITTI label_2 folder or a MOTChallenge gt.txt",
    )
    evaluate.add_argument(
        "--images",
        type=Path,
        metavar="DIR",
        help="COCO: the image folder (default: images/ beside the JSON, else its folder); KITTI: the image_2 folder (default: beside "
        "label_2); MOTChallenge: the video, or the frame folder (default: the sequence's img1/)",
    )
    evaluate.add_argument(
        "--target",
        "-t",
        default="local",
        help="where the model runs: local (this CPU, ONNX Runtime; the default), or a target, comma list or group: the current release on "
        "each target runs its own contiguous part of the images (its engine or backend), and the detections are scored here",
    )
    evaluate.add_argument("--shards", type=int, default=1, metavar="N", help="detect on N parts of the labelled images at once (same figures)")
    evaluate.add_argument(
        "--ray",
        nargs="?",
        const="local",
        metavar="ADDRESS",
        help="run the shards as Ray tasks: on a Ray started here (no ADDRESS) or a cluster's (optional extra `ray`); "
        "every Ray node must see the pipeline, its model and the images at the same paths as here",
    )
    evaluate.add_argument(
        "--allow-partial",
        action="store_true",
        help="with a group: when a target fails, score the images the others ran (the failed part's images are left out, named)",
    )
    evaluate.add_argument("--json", type=Path, metavar="FILE", help="also write the whole result (report.json's content) to FILE")
    evaluate.add_argument(
        "--report-dir",
        type=Path,
        help="an empty folder for report.json, junit.xml, report.html, pr/ and worst/ (default: reports/<pipeline>/<time>-<target>-evaluate/)",
    )
    evaluate.add_argument("--force", action="store_true", help="empty --report-dir first when it already holds files")


def evaluate_command(args: argparse.Namespace, console: Console, on_targets=None) -> int:
    """`on_targets`: what runs the images on targets (tools/validation/evaluate_targets.py: the CLI gives it)."""
    from tools.console import RichProgress
    from tools.evaluate import report as files
    from tools.evaluate.run import Request, evaluate_run
    from tools.history.hook import finished
    from tools.history.label_matches import write_matches
    from tools.reports.report_dirs import check_report_dir, empty_report_dir, new_run_folder, update_latest

    folder = check_report_dir(args.report_dir, args.force) if args.report_dir is not None else None
    if args.json is not None and args.json.resolve() in (args.labels.resolve(), args.pipeline.resolve()):
        from sdk.errors import ConfigError

        raise ConfigError(f"--json {args.json}: that is an input of this command", hint="name a new file for the result")
    with RichProgress(console) as progress:
        result, matches = evaluate_run(
            Request(args.pipeline, args.labels, args.images, args.target, shards=args.shards, ray=args.ray, partial=args.allow_partial),
            progress,
            on_targets,
        )
    if folder is None:
        folder = new_run_folder(result["pipeline"], args.target, "evaluate")
    elif args.force:
        empty_report_dir(folder)
    files.write(result, folder)
    write_matches(matches, folder)
    if args.report_dir is None:
        update_latest(folder)
    if args.json is not None:
        files.write_json(result, args.json)
    for line in files.summary(result):
        console.print(line, highlight=False, markup=False, soft_wrap=True)
    finished(folder, "evaluate")  # into the run history (never fails the run)
    sys.stderr.write(f"report: {folder}\n")
    return EXIT_CODES[result["verdict"]]


__all__ = ["EXIT_CODES", "add_parsers", "evaluate_command"]
