"""Outputs are checked at load, before anything is sent: no two on one path, none on the run's own files, none
outside the run's folder or hidden, and a video's codec in a container it goes in."""

from __future__ import annotations

from pathlib import Path

import pytest

from sdk.errors import ConfigError
from sdk.spec import load_pipeline
from sdk.spec.sinks import RUN_FILES

REPO = Path(__file__).resolve().parents[3]
EXAMPLE_TEXT = (REPO / "pipelines" / "pedestrian.yaml").read_text()
SINKS = "sinks:\n  - {kind: jsonl, path: detections.jsonl}\n  - {kind: video, path: annotated.mp4}   # MPEG-4 part 2, plays everywhere\n"
SOURCE = EXAMPLE_TEXT[EXAMPLE_TEXT.index("source:\n") : EXAMPLE_TEXT.index("\npreprocess:")]
TWO_CAMERAS = (SOURCE, "sources:\n  front: {uri: file://assets/vtest.avi}\n  rear: {uri: file://assets/vtest.avi}\n")


@pytest.fixture()
def folder(tmp_path: Path) -> Path:
    (tmp_path / "assets").mkdir()
    for name in ("vtest.avi", "ssdlite_pedestrian.onnx"):
        (tmp_path / "assets" / name).write_bytes(b"stand-in: the loader only checks that files exist")
    return tmp_path


def with_sinks(folder: Path, sinks: str, *edits: tuple[str, str]) -> Path:
    assert SINKS in EXAMPLE_TEXT
    text = EXAMPLE_TEXT.replace(SINKS, "sinks:\n" + sinks)
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new)
    path = folder / "p.yaml"
    path.write_text(text)
    return path


def error_of(path: Path) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_pipeline(path)
    assert "\n" not in info.value.message
    return info.value


@pytest.mark.parametrize(
    "sinks",
    [
        "  - {kind: jsonl, path: out.jsonl}\n  - {kind: jsonl, path: out.jsonl}\n",
        "  - {kind: jsonl, path: out.jsonl}\n  - {kind: jsonl, path: ./out.jsonl}\n",
        "  - {kind: jsonl, path: Out.jsonl}\n  - {kind: jsonl, path: out.jsonl}\n",  # a FAT card or a laptop would merge them
        "  - {kind: jsonl}\n  - {kind: jsonl}\n",  # both default to detections.jsonl
    ],
)
def test_two_outputs_on_one_path_are_refused_naming_both(folder, sinks):
    error = error_of(with_sinks(folder, sinks))
    assert "p.yaml:" in error.message and "sinks[1].path: " in error.message
    assert "is also the path of sinks[0] (jsonl, " in error.message and "allowed: a path of its own for each output" in error.message
    assert "overwrite each other" in error.hint


@pytest.mark.parametrize("name", ["report.json", "Report.JSON", "junit.xml", "timeline.npz", "report.html", "report.json/video.mp4"])
def test_an_output_on_one_of_the_runs_own_files_is_refused(folder, name):
    sink = f"  - {{kind: video, path: {name}}}\n" if name.endswith(".mp4") else f"  - {{kind: jsonl, path: {name}}}\n"
    error = error_of(with_sinks(folder, sink))
    assert f"sinks[0].path: '{name}' is one of the run's own files; allowed: any name but report.json, junit.xml" in error.message
    assert "report.json" in RUN_FILES


def test_only_a_jsonl_sink_may_write_the_reports_detections_file(folder):
    error = error_of(with_sinks(folder, "  - {kind: video, path: detections.jsonl, fourcc: MJPG}\n"))
    assert "sinks[0].path: 'detections.jsonl' is the report's detections file; allowed: detections.jsonl for a jsonl sink only" in error.message


@pytest.mark.parametrize(
    ("path", "problem"),
    [
        ("../up.jsonl", "leaves the run's folder"),
        ("/tmp/x.jsonl", "is absolute"),
        (".hidden.jsonl", "is a hidden name"),
        ("a/./.b/c.jsonl", "is a hidden name"),
    ],
)
def test_an_output_outside_the_folder_or_hidden_is_refused(folder, path, problem):
    error = error_of(with_sinks(folder, f"  - {{kind: jsonl, path: '{path}'}}\n"))
    assert "sinks[0].path: " in error.message and problem in error.message


def test_a_file_where_another_output_needs_a_folder_and_a_service_segment_name_are_refused(folder):
    inside = error_of(with_sinks(folder, "  - {kind: jsonl, path: out}\n  - {kind: jsonl, path: out/more.jsonl}\n"))
    assert "sinks[1].path: 'out/more.jsonl' needs a folder where there is the file of sinks[0] (jsonl, 'out')" in inside.message
    segment = error_of(with_sinks(folder, "  - {kind: jsonl, path: d.jsonl}\n  - {kind: jsonl, path: d.000002.jsonl}\n"))
    assert "'d.000002.jsonl' is the name of a numbered segment (in a service) of sinks[0]" in segment.message


def test_a_cameras_own_video_may_not_fall_on_another_output(folder):
    after = error_of(with_sinks(folder, "  - {kind: video, path: v.mp4}\n  - {kind: jsonl, path: v-rear.mp4}\n", TWO_CAMERAS))
    assert "sinks[1].path: 'v-rear.mp4' is also the path of sinks[0] (video, 'v-rear.mp4')" in after.message
    before = error_of(with_sinks(folder, "  - {kind: jsonl, path: v-REAR.mp4}\n  - {kind: video, path: v.mp4}\n", TWO_CAMERAS))
    assert "sinks[1].path: 'v.mp4' (its camera's file 'v-rear.mp4') is also the path of sinks[0] (jsonl, 'v-REAR.mp4')" in before.message
    mosaic = "  - {kind: video, path: v.mp4, mosaic: true}\n  - {kind: jsonl, path: v-rear.mp4}\n"  # one video, at v.mp4
    assert len(load_pipeline(with_sinks(folder, mosaic, TWO_CAMERAS)).spec.sinks) == 2


@pytest.mark.parametrize(
    ("sink", "expected"),
    [
        ("{kind: video, path: a.mp4, fourcc: H264}", "sinks[0].fourcc: Input should be 'mp4v', 'XVID', 'DIVX', 'FMP4' or 'MJPG' (got 'H264')"),
        ("{kind: video, path: a.webm}", "sinks[0].path: 'a.webm' with fourcc mp4v; allowed: a .mp4, .mov, .mkv or .avi file for mp4v"),
        ("{kind: video, path: a.m4v, fourcc: MJPG}", "allowed: a .avi, .mkv, .mov or .mp4 file for MJPG"),
    ],
)
def test_a_video_codec_is_one_the_sdk_writes_in_a_container_it_goes_in(folder, sink, expected):
    assert expected in error_of(with_sinks(folder, f"  - {sink}\n")).message


def test_outputs_of_their_own_load(folder):
    sinks = (
        "  - {kind: jsonl, path: out/detections.jsonl}\n  - {kind: video, path: out/annotated.avi, fourcc: MJPG}\n"
        "  - {kind: video, path: front.mkv}\n  - {kind: null}\n  - {kind: null}\n"
    )
    spec = load_pipeline(with_sinks(folder, sinks)).spec
    assert [s.kind for s in spec.sinks] == ["jsonl", "video", "video", "null", "null"]


def test_the_run_files_are_those_the_runtime_and_the_host_write_into_a_runs_folder():
    from sdk.runtime.junit import JUNIT_FILE
    from sdk.runtime.report import REPORT_FILE
    from sdk.runtime.timeline import TIMELINE_FILE
    from tools.deploy.fleet import FLEET_FILE
    from tools.deploy.flow import DEVICE_FILE
    from tools.deploy.flow import RUN_FILES as HOST_RUN_FILES
    from tools.int8.for_deploy import ACCURACY_FILE

    written = {*HOST_RUN_FILES, REPORT_FILE, JUNIT_FILE, TIMELINE_FILE, DEVICE_FILE, FLEET_FILE, ACCURACY_FILE}
    assert written - {"detections.jsonl"} <= set(RUN_FILES)  # detections.jsonl: a JSONL sink's own (the report contract)


def test_an_empty_sink_list_is_refused_naming_the_null_sink_and_what_a_measured_run_still_writes(folder):
    path = with_sinks(folder, "")
    path.write_text(path.read_text().replace("sinks:\n", "sinks: []\n"))
    error = error_of(path)
    assert error.message.endswith("sinks: [] names no output; allowed: one sink or more"), error.message
    assert "sinks: [{kind: null}]" in error.hint and "still writes detections.jsonl into its report folder" in error.hint


def test_the_latency_record_in_a_vision_msgs_file_is_refused_naming_the_key(folder):
    error = error_of(with_sinks(folder, "  - {kind: jsonl}\n  - {kind: mcap, messages: vision_msgs, latency: true}\n"))
    assert "sinks[1].latency: latency: true with messages: vision_msgs; allowed: the latency record with messages: foxglove" in error.message
    assert "messages: foxglove and latency: true" in error.hint
    load_pipeline(with_sinks(folder, "  - {kind: jsonl}\n  - {kind: mcap, latency: true}\n"))  # the foxglove file takes it
