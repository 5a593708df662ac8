"""`deploy` and TensorRT: which targets get an engine, and a build that cannot happen stops the deploy first."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from sdk.artifacts import ModelArtifacts
from sdk.backends import create_backend
from sdk.errors import ConfigError, EngineBuildError
from tools.deploy.flow import Deploy

from .test_remote_build import orin_without_gpu  # noqa: F401  (fixture: an AGX Orin with TensorRT 10.3 but no GPU)

REPO = Path(__file__).resolve().parents[3]


def example_with_backend(folder: Path, backend: str) -> Path:
    if not folder.exists():
        shutil.copytree(REPO / "pipelines" / "assets", folder / "assets")
    text = (REPO / "pipelines" / "pedestrian.yaml").read_text().replace("  backend: auto\n", f"  backend: {backend}\n")
    text = text[: text.index("budgets:")] + "budgets:\n  end_to_end: {p50_ms: 60000}\n"
    (folder / "p.yaml").write_text(text)
    return folder / "p.yaml"


@pytest.mark.slow
def test_a_tensorrt_pipeline_is_built_on_the_target_and_a_failed_build_activates_nothing(orin_without_gpu, ssh_target, tmp_path):  # noqa: F811
    pipeline = example_with_backend(tmp_path / "p", "tensorrt")
    with pytest.raises(EngineBuildError, match="no CUDA driver"):
        Deploy(pipeline, "sim", frames=3, report_dir=tmp_path / "r")()
    assert not (ssh_target.root / "current").exists()  # the build failed before staging: the target is untouched


@pytest.mark.slow
def test_auto_runs_onnxruntime_where_the_device_has_no_gpu(orin_without_gpu, ssh_target, tmp_path):  # noqa: F811
    pipeline = example_with_backend(tmp_path / "p", "auto")
    result = Deploy(pipeline, "sim", frames=3, report_dir=tmp_path / "r")()
    assert result.report["backend"].startswith("onnxruntime")
    assert not (ssh_target.root / "current" / "artifacts" / "model.engine").exists()


def test_tensorrt_on_a_target_without_it_is_refused_before_anything_is_sent(tmp_path, state_dir):
    pipeline = example_with_backend(tmp_path / "p", "tensorrt")
    with pytest.raises(EngineBuildError, match="model.backend is tensorrt but local has no TensorRT"):
        Deploy(pipeline, "local", frames=3, report_dir=tmp_path / "r")()
    assert not (state_dir / "targets" / "local" / "current").exists()


def test_backend_choice_on_the_device(prepared_example, tmp_path):
    release = tmp_path / "artifacts"
    shutil.copytree(prepared_example.folder, release)
    artifacts = ModelArtifacts(release)
    with pytest.raises(ConfigError, match="the release has no engine"):
        create_backend("tensorrt", artifacts.model_path, engine_path=artifacts.engine_path)
    artifacts.engine_path.write_bytes(b"ftrt")  # an engine, but this machine has no CUDA device
    assert create_backend("auto", artifacts.model_path, engine_path=artifacts.engine_path).name == "onnxruntime"
    assert {spec.name for spec in artifacts.declared_tensors()} == {"Preprocessor/sub:0", "concat:0", "concat_1:0"}
