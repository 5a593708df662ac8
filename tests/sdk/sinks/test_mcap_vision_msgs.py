"""The mcap sink with `messages: vision_msgs`: ROS 2 Detection2DArray messages (CDR, ros2msg schema) per camera, with
track ids and the frames as sensor_msgs/msg/CompressedImage, decoded back by mcap-ros2-support's decoder. (Boxes
against detections.jsonl through the frame loop: tests/sdk/runtime/test_recorded_runs.py.)"""

from __future__ import annotations

import cv2
import numpy as np

from sdk.frame import Frame
from sdk.postprocess.detections import Detections
from sdk.sinks.mcap_sink import McapSink

T0 = 1_700_000_000_000_000_000


def test_detection_arrays_per_camera_with_track_ids_and_images(tmp_path):
    from mcap.reader import make_reader
    from mcap_ros2.decoder import DecoderFactory

    sink = McapSink(tmp_path / "ros.mcap", messages="vision_msgs", images=True, cameras=["front", "rear"])
    sink.open()
    image = np.full((48, 64, 3), (30, 160, 220), np.uint8)
    for i in range(3):
        detections = Detections(4, ("person", "car"))
        detections.count, detections.tracked = 2, True
        detections.boxes[:2] = [[10 + i, 5, 30 + i, 40.5], [1, 2, 3, 4]]
        detections.scores[:2], detections.class_ids[:2], detections.track_ids[:2] = [0.9, 0.25], [0, 1], [7, -1]
        for camera in ("front", "rear"):
            sink.write(Frame(i, 0, image, camera=camera, stamp_ns=T0 + i * 50_000_000, frame_id=f"{camera}_optical"), detections)
    assert not (tmp_path / "ros.mcap").exists()  # written under its partial name until the run ends
    sink.close()
    got: dict[str, list] = {}
    with (tmp_path / "ros.mcap").open("rb") as handle:
        for schema, channel, message, decoded in make_reader(handle, decoder_factories=[DecoderFactory()]).iter_decoded_messages():
            assert schema.encoding == "ros2msg" and channel.message_encoding == "cdr"
            got.setdefault(channel.topic, []).append((schema.name, message.log_time, decoded))
    assert sorted(got) == ["/camera/image/compressed/front", "/camera/image/compressed/rear", "/detections/front", "/detections/rear"]
    for camera in ("front", "rear"):
        arrays = got[f"/detections/{camera}"]
        assert [(name, t) for name, t, _ in arrays] == [("vision_msgs/msg/Detection2DArray", T0 + i * 50_000_000) for i in range(3)]
        last = arrays[2][2]
        assert last.header.frame_id == f"{camera}_optical" and last.header.stamp.nanosec == 100_000_000
        person, car = last.detections
        assert (person.bbox.center.position.x, person.bbox.center.position.y, person.bbox.size_x, person.bbox.size_y) == (22.0, 22.75, 20.0, 35.5)
        assert (person.results[0].hypothesis.class_id, person.id, car.results[0].hypothesis.class_id, car.id) == ("person", "7", "car", "")
        assert abs(person.results[0].hypothesis.score - 0.9) < 1e-6 and list(person.results[0].pose.covariance) == [0.0] * 36
        name, _, jpeg = got[f"/camera/image/compressed/{camera}"][0]
        assert name == "sensor_msgs/msg/CompressedImage" and jpeg.format == "jpeg" and jpeg.header.frame_id == f"{camera}_optical"
        decoded = cv2.imdecode(np.frombuffer(bytes(jpeg.data), np.uint8), cv2.IMREAD_COLOR)
        assert np.abs(decoded.astype(int) - image.astype(int)).max() <= 4
    assert sink.stats.written == 6
