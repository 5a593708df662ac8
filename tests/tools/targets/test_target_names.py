"""The example target file validates and documents every key; an unknown target name gets a "did you mean"."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from sdk.errors import TargetError
from tools.cli import run
from tools.targets import resolve_target
from tools.targets.spec import TargetSpec

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "targets" / "orin-01.yaml.example"


@pytest.fixture()
def targets(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "targets"
    folder.mkdir()
    monkeypatch.setenv("SDK_TARGETS_DIR", str(folder))
    monkeypatch.setenv("SDK_STATE_DIR", str(tmp_path / "state"))
    return folder


def test_the_example_target_file_validates_as_a_jetpack_6_agx_orin(targets):
    shutil.copyfile(EXAMPLE, targets / "orin-01.yaml")
    target = resolve_target("orin-01")
    spec = target.spec
    assert spec.platform == "jetson-agx-orin" and spec.python == "python3" and spec.port == 22
    assert spec.key_passphrase_env == "ORIN01_KEY_PASSPHRASE"
    assert spec.host_key.known_hosts == "orin-01.known_hosts" and spec.host_key.fingerprint is None
    assert target.host_path(spec.host_key.known_hosts) == targets / "orin-01.known_hosts"  # beside the file


def test_the_example_mentions_every_key_of_a_target_file():
    text = EXAMPLE.read_text()
    missing = [key for key in TargetSpec.model_fields if f"{key}:" not in text]
    assert not missing, f"{EXAMPLE.name} does not mention {missing}"


def test_an_unknown_target_name_suggests_the_closest_one(targets):
    (targets / "orin-01.yaml").write_text(EXAMPLE.read_text())
    with pytest.raises(TargetError) as caught:
        resolve_target("orin-1")
    assert caught.value.message == "unknown target 'orin-1'; did you mean 'orin-01'? known targets: local, orin-01"
    assert "sdk targets add orin-1" in caught.value.hint
    with pytest.raises(TargetError, match=r"^unknown target 'vehicle-7'; known targets: local, orin-01$"):
        resolve_target("vehicle-7")


def test_deploy_to_a_misspelled_target_is_one_error_with_the_suggestion(targets, capsys):
    (targets / "orin-01.yaml").write_text(EXAMPLE.read_text())
    code = run(["deploy", "--target", "orin-1", str(REPO / "pipelines" / "pedestrian.yaml")])
    err = capsys.readouterr().err
    assert code == 1
    lines = err.splitlines()
    assert lines[0] == "error: unknown target 'orin-1'; did you mean 'orin-01'? known targets: local, orin-01"
    assert lines[1].startswith("hint: ") and len(lines) == 2


def test_a_name_that_only_has_the_example_points_at_it(targets):
    shutil.copyfile(EXAMPLE, targets / "orin-01.yaml.example")
    with pytest.raises(TargetError) as caught:
        resolve_target("orin-01")
    assert caught.value.hint.startswith(f"{targets / 'orin-01.yaml.example'} is an example: copy it to {targets / 'orin-01.yaml'}")
