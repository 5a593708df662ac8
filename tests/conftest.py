"""Shared fixtures: the real assets, the example pipeline, and a prepared model cached once per session."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_ASSETS = REPO.parent / "shared" / "assets"
EXAMPLE = REPO / "pipelines" / "pedestrian.yaml"


def asset(name: str) -> Path:
    """The real asset from ../shared/assets (as CI has it), else the example's own copy."""
    for folder in (SHARED_ASSETS, REPO / "pipelines" / "assets"):
        if (folder / name).is_file():
            return folder / name
    pytest.skip(f"asset {name} not found")


@pytest.fixture(scope="session")
def video_path() -> Path:
    return asset("vtest.avi")


@pytest.fixture(scope="session")
def detector_path() -> Path:
    return asset("ssdlite_pedestrian.onnx")


@pytest.fixture(scope="session")
def example_pipeline():
    from sdk.spec import load_pipeline

    return load_pipeline(EXAMPLE)


@pytest.fixture(scope="session")
def prepared_example(example_pipeline, tmp_path_factory):
    from tools.prepare import PrepareModel

    return PrepareModel(example_pipeline, tmp_path_factory.mktemp("cache"))()


@pytest.fixture()
def state_dir(tmp_path, monkeypatch) -> Path:
    """Host state (cache, local target) in a fresh folder for this test."""
    folder = tmp_path / "state"
    monkeypatch.setenv("SDK_STATE_DIR", str(folder))
    return folder
