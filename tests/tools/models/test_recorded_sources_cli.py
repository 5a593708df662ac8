"""`sdk init MODEL --source mcap://...` and `sdk check` on a recording's camera topic: the file written for it runs at
the recorded pace and is checked clean; a topic that is not in the recording is one error listing those that are."""

from __future__ import annotations

import shutil

import pytest
import yaml

from sdk.spec import load_pipeline
from tests.integration.test_blazeface_real_model import ASSETS
from tests.sdk.sources.bags import frames, stamps, write_mcap, write_rosbag2
from tests.tools.models.test_init_pipeline import in_process


@pytest.fixture()
def sdk(capfd, monkeypatch, tmp_path):
    def call(*args: str):
        return in_process(capfd, monkeypatch, list(args), tmp_path, {"COLUMNS": "400", "SDK_STATE_DIR": str(tmp_path / ".state")})

    return call


@pytest.fixture()
def yolox(tmp_path):
    shutil.copy(ASSETS / "yolox_nano.onnx", tmp_path / "yolox_nano.onnx")
    write_mcap(tmp_path / "drive.mcap", frames(12, 320, 240), stamps(12, period_ms=50))  # 20 fps
    return tmp_path


def test_init_writes_a_pipeline_for_a_recordings_topic_at_its_pace_and_check_passes_it(yolox, sdk):
    done = sdk("init", "yolox_nano.onnx", "--source", "mcap://drive.mcap?topic=/camera/image_raw")
    assert done.returncode == 0, done.stderr
    spec = load_pipeline(yolox / "yolox_nano.yaml").spec
    assert spec.source.uri == "mcap://drive.mcap?topic=/camera/image_raw" and spec.source.replay.pace == "recorded"
    assert spec.source.replay.loop  # 12 frames, fewer than a backed p99 needs: played again from the start
    assert spec.budgets.end_to_end.p50_ms == 50  # a 20 fps camera's frame period, from the recording's index
    done = sdk("check", "yolox_nano.yaml")
    assert done.returncode == 0 and "mcap://drive.mcap?topic=/camera/image_raw: frames until it is stopped" in done.stdout, done.stdout


def test_a_topic_not_in_the_recording_is_one_error_listing_its_image_topics(yolox, sdk):
    done = sdk("init", "yolox_nano.onnx", "--source", "mcap://drive.mcap?topic=/front")
    assert done.returncode == 1 and "Traceback" not in done.stderr and not (yolox / "yolox_nano.yaml").exists()
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1
    assert errors[0].endswith("topic '/front' is not in the recording; its image topics: /camera/image_raw (sensor_msgs/msg/Image)")
    write_rosbag2(yolox / "bag", frames(3, 320, 240), stamps(3))
    assert sdk("init", "yolox_nano.onnx", "--source", "rosbag2://bag?topic=/camera/image_raw").returncode == 0
    path = yolox / "yolox_nano.yaml"
    data = yaml.safe_load(path.read_text())
    data["source"]["uri"] = "rosbag2://bag?topic=/rear"
    path.write_text(yaml.safe_dump(data))
    done = sdk("check", "yolox_nano.yaml")
    assert done.returncode == 1
    problem = [line for line in done.stdout.splitlines() if line.lstrip().startswith("problem") and "source" in line]
    assert len(problem) == 1 and "source.uri: rosbag2://" in problem[0]
    assert problem[0].endswith("its image topics: /camera/image_raw (sensor_msgs/msg/Image)")
