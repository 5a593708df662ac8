"""A recording a pipeline replays travels with the release (an MCAP file, a rosbag2 folder with every file in it), and
the release ships the recording packages only to a pipeline that reads or writes recordings."""

from __future__ import annotations

from sdk.spec import load_pipeline
from tools.release.bundle import PIPELINE_DIR, collect_bundle
from tools.release.wheels import pipeline_modules

PIPELINE = """\
version: 1
name: drive
sources:
  front: {{uri: "mcap://drives/day1.mcap?topic=/front/image"}}
  rear: {{uri: "rosbag2://drives/bag?topic=/rear/image"}}
preprocess: {{resize: {{width: 8, height: 8}}}}
model: {{path: m.onnx}}
postprocess:
  decoder: {{kind: classify, output: p}}
  classes: [a, b]
sinks: [{sinks}]
"""


class NoArtifacts:
    def files(self):
        return []


def test_the_recordings_travel_with_the_release_and_their_packages_with_it(tmp_path):
    (tmp_path / "drives" / "bag").mkdir(parents=True)
    for name in ("m.onnx", "drives/day1.mcap", "drives/bag/metadata.yaml", "drives/bag/bag_0.db3"):
        (tmp_path / name).write_bytes(b"stand-in")
    (tmp_path / "p.yaml").write_text(PIPELINE.format(sinks="{kind: jsonl}, {kind: mcap}"))
    pipeline = load_pipeline(tmp_path / "p.yaml")
    bundle = collect_bundle(pipeline, NoArtifacts(), "key")
    for name in ("drives/day1.mcap", "drives/bag/metadata.yaml", "drives/bag/bag_0.db3"):
        assert bundle.files[f"{PIPELINE_DIR}/{name}"] == tmp_path / name
    assert bundle.modules == ("mcap", "mcap_ros2", "rosbags", "foxglove")
    (tmp_path / "q.yaml").write_text(PIPELINE.format(sinks="{kind: jsonl}").replace("mcap://drives/day1.mcap", "rosbag2://drives/bag"))
    assert pipeline_modules(load_pipeline(tmp_path / "q.yaml").spec) == ("rosbags",)
    ros2 = PIPELINE.format(sinks="{kind: mcap, messages: vision_msgs}").replace("mcap://drives/day1.mcap", "rosbag2://drives/bag")
    (tmp_path / "r.yaml").write_text(ros2)
    assert pipeline_modules(load_pipeline(tmp_path / "r.yaml").spec) == ("rosbags", "mcap", "mcap_ros2")  # no foxglove-sdk
    # deploy --live-view serves the Foxglove live view whatever the sinks say: its package travels too
    viewed = collect_bundle(load_pipeline(tmp_path / "q.yaml"), NoArtifacts(), "key", live_view=8765)
    assert viewed.modules == ("rosbags", "foxglove")
