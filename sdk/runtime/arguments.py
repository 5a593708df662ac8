"""What a device command runs, as `python -m sdk run` and `python -m sdk profile` both take it: a release folder
(only a release that may run here: sdk/store/startable.py), or a pipeline file with its prepared artifacts."""

from __future__ import annotations

import argparse
from pathlib import Path

from sdk.artifacts import ModelArtifacts
from sdk.spec.loader import PipelineFile


def add_what_runs(parser: argparse.ArgumentParser) -> None:
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--release", type=Path, help="a release folder (with manifest.json)")
    where.add_argument("--pipeline", type=Path, help="a pipeline file (needs --artifacts)")
    parser.add_argument("--artifacts", type=Path, help="folder of the prepared model (with --pipeline)")


def what_runs(parser: argparse.ArgumentParser, args: argparse.Namespace) -> tuple[str | None, PipelineFile, ModelArtifacts]:
    """(release id or None, pipeline, artifacts); a release is checked first: only its verified bytes may run."""
    if args.release is not None:
        from sdk.release import load_release
        from sdk.store.startable import allowed_to_run

        allowed_to_run(args.release)
        return load_release(args.release)
    if args.artifacts is None:
        parser.error("--pipeline needs --artifacts")
    from sdk.spec.loader import load_pipeline

    return None, load_pipeline(args.pipeline, check_files=False), ModelArtifacts(args.artifacts)


__all__ = ["add_what_runs", "what_runs"]
