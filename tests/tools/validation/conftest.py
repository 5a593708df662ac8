"""One deployed base for the validation tests: the relaxed example deployed once to a local target, built once per
run and shared by the xdist workers; a test copies it (its pipeline folder and host state) into its own tmp_path."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest


def _deploy_relaxed(folder: Path) -> None:
    from tools.deploy.flow import Deploy

    from .test_validate import relaxed_example

    pipeline = relaxed_example(folder / "p")
    saved = os.environ.get("SDK_STATE_DIR")
    os.environ["SDK_STATE_DIR"] = str(folder / "state")
    try:
        Deploy(pipeline, "local", frames=3, report_dir=folder / "deploy")()
    finally:
        if saved is None:
            del os.environ["SDK_STATE_DIR"]
        else:
            os.environ["SDK_STATE_DIR"] = saved


@pytest.fixture()
def deployed_relaxed(tmp_path_factory, tmp_path):
    """Copy the shared base into this test: returns a function that puts the relaxed example's folder at `pipeline_folder`
    and the host state, whose local target has it current (and the prepared model cached), at `state`."""
    from tests.conftest import shared_folder

    base = shared_folder(tmp_path_factory, "validation-relaxed-deployed", _deploy_relaxed)

    def copy(pipeline_folder: Path, state: Path) -> Path:
        shutil.copytree(base / "p", pipeline_folder, symlinks=True, dirs_exist_ok=True)
        shutil.copytree(base / "state", state, symlinks=True, dirs_exist_ok=True)
        return pipeline_folder / "pedestrian.yaml"

    return copy
