"""Target files share the pipeline's number rules: `port: true` or `connect_s: .nan` is one clear error."""

from __future__ import annotations

import pytest

from sdk.errors import ConfigError
from tools.targets import load_target_file

TARGET = """\
host: 192.168.55.1
port: 22
user: nvidia
key_file: orin.key
host_key: {fingerprint: "SHA256:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}
platform: jetson-agx-orin
remote_root: /opt/perception
timeouts: {connect_s: 10, command_s: 300, deadline_s: 3600, keepalive_s: 5}
health_frames: 5
"""


@pytest.fixture()
def targets(tmp_path, monkeypatch):
    monkeypatch.setenv("SDK_STATE_DIR", str(tmp_path / "state"))
    folder = tmp_path / "targets"
    folder.mkdir()
    monkeypatch.setattr("tools.targets.targets_dir", lambda: folder)
    return folder


def test_the_readme_target_loads(targets):
    (targets / "orin.yaml").write_text(TARGET)
    spec = load_target_file("orin").spec
    assert spec.port == 22 and spec.timeouts.connect_s == 10.0 and spec.health_frames == 5


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ("port: 22", "port: true", "port: true is a boolean, not an integer; allowed: an integer from 1 to 65535"),
        ("connect_s: 10", "connect_s: .nan", "timeouts.connect_s: .nan is not a finite number; allowed: a number above 0 and at most 300"),
        ("health_frames: 5", "health_frames: 1e9", "health_frames: 1e9 is out of range; allowed: an integer from 1 to 10000"),
    ],
)
def test_a_bad_number_in_a_target_file(targets, old, new, expected):
    (targets / "orin.yaml").write_text(TARGET.replace(old, new))
    with pytest.raises(ConfigError) as info:
        load_target_file("orin")
    assert expected in info.value.message and "\n" not in info.value.message
