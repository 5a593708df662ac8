"""Recorded drives through the frame loop on `local`: the same frames from an MCAP file and from a video give the
same detections (the real detector), each line of detections.jsonl carries the recorded stamp, and the mcap sink's
foxglove.ImageAnnotations read back (with the `mcap` library) hold the same boxes on the same stamps."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import cv2
import pytest
import yaml

from sdk.runtime import PipelineRunner
from sdk.runtime.report import build_report
from sdk.spec import load_pipeline
from tests.sdk.sources.bags import T0_NS, stamps, write_mcap

REPO = Path(__file__).resolve().parents[3]
FRAMES = 5


def read_annotations(path: Path) -> list[tuple[str, int, dict, list]]:
    """(topic, log time, metadata, [(label, score, box)]) of every annotations message of an mcap sink's file."""
    from mcap.reader import make_reader
    from mcap_protobuf.decoder import DecoderFactory

    out = []
    with path.open("rb") as handle:
        reader = make_reader(handle, decoder_factories=[DecoderFactory()])
        protobuf = [c.topic for c in reader.get_summary().channels.values() if c.message_encoding == "protobuf"]  # not the JSON /latency
        for schema, channel, message, decoded in reader.iter_decoded_messages(topics=protobuf):
            if schema.name != "foxglove.ImageAnnotations":
                continue  # the frames themselves (images: true)
            assert schema.encoding == "protobuf"
            boxes = []
            for points, text in zip(decoded.points, decoded.texts, strict=True):
                corners = [(p.x, p.y) for p in points.points]
                assert len(corners) == 4 and points.type == 2  # LINE_LOOP
                label, score = text.text.split(" ")[:2]
                boxes.append((label, float(score), [corners[0][0], corners[0][1], corners[2][0], corners[2][1]]))
            out.append((channel.topic, message.log_time, {kv.key: kv.value for kv in decoded.metadata}, boxes))
    return out


def read_latency(path: Path) -> list[tuple[int, dict]]:
    """(log time, record) of every JSON latency record of an mcap sink's file (`latency: true`)."""
    from mcap.reader import make_reader

    with path.open("rb") as handle:
        reader = make_reader(handle)
        out = []
        for schema, channel, message in reader.iter_messages(topics=["/latency"]):
            assert (schema.name, schema.encoding, channel.message_encoding) == ("sdk.FrameLatency", "jsonschema", "json")
            out.append((message.log_time, json.loads(message.data)))
    return out


def read_detection_arrays(path: Path) -> list[tuple[str, int, dict, list]]:
    """(topic, log time, header, [(label, score, box)]) of every vision_msgs/msg/Detection2DArray in an mcap sink's file,
    decoded by mcap-ros2-support's decoder (boxes back from centre and size to corners)."""
    from mcap.reader import make_reader
    from mcap_ros2.decoder import DecoderFactory

    out = []
    with path.open("rb") as handle:
        reader = make_reader(handle, decoder_factories=[DecoderFactory()])
        for schema, channel, message, decoded in reader.iter_decoded_messages():
            assert (schema.name, schema.encoding, channel.message_encoding) == ("vision_msgs/msg/Detection2DArray", "ros2msg", "cdr")
            boxes = []
            for d in decoded.detections:
                (result,) = d.results
                c, w, h = d.bbox.center.position, d.bbox.size_x, d.bbox.size_y
                assert d.header.stamp == decoded.header.stamp and d.bbox.center.theta == 0.0 and d.id == ""
                boxes.append((result.hypothesis.class_id, result.hypothesis.score, [c.x - w / 2, c.y - h / 2, c.x + w / 2, c.y + h / 2]))
            stamp = decoded.header.stamp.sec * 1_000_000_000 + decoded.header.stamp.nanosec
            assert stamp == message.log_time
            out.append((channel.topic, message.log_time, {"frame_id": decoded.header.frame_id}, boxes))
    return out


def same_boxes(annotations: list, lines: list[dict]) -> None:
    """Every frame's boxes in the MCAP equal the JSONL sink's (which rounds to 2 decimals), in order."""
    assert len(annotations) == len(lines)
    for (_, _, meta, boxes), line in zip(annotations, lines, strict=True):
        assert int(meta.get("frame", line["frame"])) == line["frame"]  # a Detection2DArray has no frame number
        assert [(label, round(score, 2)) for label, score, _ in boxes] == [(d["label"], round(d["score"], 2)) for d in line["detections"]]
        for (_, _, box), d in zip(boxes, line["detections"], strict=True):
            assert box == pytest.approx(d["box"], abs=0.006)


@pytest.fixture()
def example_folder(tmp_path, video_path):
    """The example pipeline's folder with a 5-frame clip of its video, and the clip's frames as an MCAP topic."""
    folder = tmp_path / "pipeline"
    (folder / "assets").mkdir(parents=True)
    shutil.copy(REPO / "pipelines" / "assets" / "ssdlite_pedestrian.onnx", folder / "assets")
    capture = cv2.VideoCapture(str(video_path))
    originals = [capture.read()[1] for _ in range(FRAMES)]
    capture.release()
    writer = cv2.VideoWriter(str(folder / "clip.avi"), cv2.VideoWriter_fourcc(*"MJPG"), 10, (originals[0].shape[1], originals[0].shape[0]))
    for image in originals:
        writer.write(image)
    writer.release()
    capture = cv2.VideoCapture(str(folder / "clip.avi"))
    decoded = [capture.read()[1] for _ in range(FRAMES)]  # the frames a file:// source hands out
    capture.release()
    write_mcap(folder / "drive.mcap", decoded, stamps(FRAMES, period_ms=100), frame_id="campus_cam")
    return folder


def example(folder: Path, uri: str) -> Path:
    spec = yaml.safe_load((REPO / "pipelines" / "pedestrian.yaml").read_text())
    spec["source"] = {"uri": uri, "replay": {"frames": FRAMES}}
    ros2 = {"kind": "mcap", "path": "ros2.mcap", "messages": "vision_msgs"}
    spec["sinks"] = [{"kind": "jsonl"}, {"kind": "mcap", "path": "detections.mcap", "latency": True}, ros2]
    spec["model"]["threads"] = 1
    for key in ("calibration", "budgets"):
        spec.pop(key)
    path = folder / f"{uri.partition(':')[0]}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def test_the_same_frames_from_an_mcap_and_a_video_give_the_same_detections(example_folder, prepared_example, tmp_path):
    runs = {}
    for uri in ("file://clip.avi", "mcap://drive.mcap?topic=/camera/image_raw"):
        pipeline = load_pipeline(example(example_folder, uri))
        out = tmp_path / uri.partition(":")[0]
        began = time.time_ns()
        result = PipelineRunner(pipeline, prepared_example, out).run()
        ended = time.time_ns()
        lines = [json.loads(line) for line in (out / "detections.jsonl").read_text().splitlines()]
        annotations = read_annotations(out / "detections.mcap")
        runs[uri.partition(":")[0]] = (lines, annotations, began, ended)
        assert result.frames == FRAMES
        same_boxes(annotations, lines)
        arrays = read_detection_arrays(out / "ros2.mcap")
        same_boxes(arrays, lines)
        assert {a[0] for a in arrays} == {"/detections"}
        if uri.startswith("mcap"):  # on the recorded stamps, with the recording's frame id
            assert [a[1] for a in arrays] == stamps(FRAMES, period_ms=100) and {a[2]["frame_id"] for a in arrays} == {"campus_cam"}
        else:
            assert all(began <= a[1] <= ended for a in arrays)
        assert {a[0] for a in annotations} == {"/detections"}
        report = build_report(pipeline, result, target="local")
        assert [o["output"] for o in report["outputs"]] == ["detections.jsonl", "detections.mcap", "ros2.mcap"]
        latency = read_latency(out / "detections.mcap")  # the frame loop's own marks, a record a frame on its time
        assert [(t, r["frame"]) for t, r in latency] == [(a[1], line["frame"]) for a, line in zip(annotations, lines, strict=True)]
        ends = result.recorder.latencies_ms()["end_to_end"]
        assert [r["end_to_end_ms"] for _, r in latency] == pytest.approx(list(ends), abs=1e-6)
        assert all(r["deadline_ms"] is None and r["missed"] is False for _, r in latency)
        assert report["outputs"][1]["written"] == FRAMES and report["out_of_order_stamps"] == 0
    video, recorded = runs["file"][0], runs["mcap"][0]
    assert sum(len(line["detections"]) for line in video) >= FRAMES  # people on the campus: the comparison compares boxes
    assert [line["detections"] for line in recorded] == [line["detections"] for line in video]
    assert [line["stamp_ns"] for line in recorded] == stamps(FRAMES, period_ms=100)
    assert {line["frame_id"] for line in recorded} == {"campus_cam"} and "stamp_ns" not in video[0]
    # The annotations lie on the recorded stamps; a video's frames, which have none, on the wall-clock time they ran.
    assert [a[1] for a in runs["mcap"][1]] == stamps(FRAMES, period_ms=100) and runs["mcap"][1][0][2]["frame_id"] == "campus_cam"
    _, annotations, began, ended = runs["file"]
    assert all(began <= a[1] <= ended for a in annotations)


TINY = """\
version: 1
name: tiny
sources:
  front: {{uri: "mcap://drive.mcap?topic=/front/image", replay: {{pace: recorded}}}}
  rear: {{uri: "mcap://drive.mcap?topic=/rear/image/compressed", replay: {{pace: recorded}}}}
preprocess:
  resize: {{width: 32, height: 32}}
  normalize: {{scale: 0.00392156862745098}}
model:
  path: tiny.onnx
  threads: 1
postprocess:
  decoder: {{kind: yolo, output: output0, layout: v5}}
  classes: [car, person]
sinks:
  - {{kind: jsonl}}
  - {{kind: mcap, images: {images}}}
"""


def test_two_camera_topics_of_one_recording_run_as_two_cameras_with_their_stamps(tmp_path):
    from tests.conftest import tiny_yolo
    from tests.sdk.sources.bags import frames
    from tools.models.prepare import PrepareModel

    folder = tmp_path / "p"
    folder.mkdir()
    tiny_yolo(folder / "tiny.onnx")
    front, rear = stamps(6, period_ms=40), stamps(6, period_ms=40, t0=T0_NS + 20_000_000)
    write_mcap(folder / "drive.mcap", frames(6), front, topic="/front/image", extra_topics={"/rear/image/compressed": (frames(6), rear, "jpeg")})
    (folder / "tiny.yaml").write_text(TINY.format(images="true"))
    pipeline = load_pipeline(folder / "tiny.yaml")
    began = time.monotonic()
    result = PipelineRunner(pipeline, PrepareModel(pipeline, tmp_path / "cache")(), tmp_path / "out").run()
    assert time.monotonic() - began >= 0.2  # paced: 200 ms from the first stamp to the last of each camera
    lines = [json.loads(line) for line in (tmp_path / "out" / "detections.jsonl").read_text().splitlines()]
    assert result.frames == 12
    assert [line["stamp_ns"] for line in lines if line["camera"] == "front"] == front
    assert [line["stamp_ns"] for line in lines if line["camera"] == "rear"] == rear
    annotations = read_annotations(tmp_path / "out" / "detections.mcap")
    for camera, stamped in (("front", front), ("rear", rear)):
        mine = [a for a in annotations if a[0] == f"/detections/{camera}"]
        assert [a[1] for a in mine] == stamped and {a[2]["camera"] for a in mine} == {camera}
        same_boxes(mine, [line for line in lines if line["camera"] == camera])
    from mcap.reader import make_reader

    with (tmp_path / "out" / "detections.mcap").open("rb") as handle:
        summary = make_reader(handle).get_summary()
    images = {c.topic: n for c_id, n in summary.statistics.channel_message_counts.items() for c in [summary.channels[c_id]] if "image" in c.topic}
    assert images == {"/camera/image/compressed/front": 6, "/camera/image/compressed/rear": 6}


def test_several_topics_in_one_uri_are_cameras_named_after_them_in_recorded_order(tmp_path):
    from tests.conftest import tiny_yolo
    from tests.sdk.sources.bags import frames
    from tools.models.prepare import PrepareModel

    folder = tmp_path / "p"
    folder.mkdir()
    tiny_yolo(folder / "tiny.onnx")
    front, rear = stamps(5, period_ms=40), stamps(5, period_ms=40, t0=T0_NS + 20_000_000)  # rear 20 ms after front
    write_mcap(folder / "drive.mcap", frames(5), front, topic="/front/image", extra_topics={"/rear/image/compressed": (frames(5), rear, "jpeg")})
    text = TINY.format(images="false").replace(
        '''sources:
  front: {uri: "mcap://drive.mcap?topic=/front/image", replay: {pace: recorded}}
  rear: {uri: "mcap://drive.mcap?topic=/rear/image/compressed", replay: {pace: recorded}}''',
        '''source: {uri: "mcap://drive.mcap?topic=/front/image&topic=/rear/image/compressed", replay: {pace: recorded}}''',
    )
    (folder / "tiny.yaml").write_text(text)
    pipeline = load_pipeline(folder / "tiny.yaml")
    assert list(pipeline.spec.cameras) == ["front_image", "rear_image_compressed"]
    assert pipeline.spec.cameras["rear_image_compressed"].uri == "mcap://drive.mcap?topic=/rear/image/compressed"
    PipelineRunner(pipeline, PrepareModel(pipeline, tmp_path / "cache")(), tmp_path / "out").run()
    lines = [json.loads(line) for line in (tmp_path / "out" / "detections.jsonl").read_text().splitlines()]
    first = min(line["t_capture_ns"] for line in lines)
    # One origin for both cameras: each frame is due at its stamp's distance from the earliest stamp of the recording.
    assert sorted((line["t_capture_ns"] - first, line["stamp_ns"] - T0_NS) for line in lines) == sorted((s - T0_NS, s - T0_NS) for s in front + rear)
    assert {line["camera"] for line in lines} == {"front_image", "rear_image_compressed"}
