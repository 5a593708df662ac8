"""mcap:// and rosbag2:// sources: recordings the tests write with known frames and stamps read back frame for frame
and stamp for stamp; the recorded pace; holes and stamps that go backwards counted; bad recordings refused by name."""

from __future__ import annotations

import subprocess
import sys
import time

import cv2
import numpy as np
import pytest
from pydantic import ValidationError

from sdk.errors import MissingDependencyError, SourceError
from sdk.sources import FrameStream, open_reader, parse_source_uri
from sdk.spec.schema import Replay
from sdk.spec.source import Source
from tests.sdk.sources.bags import T0_NS, frames, payload, stamps, write_mcap, write_rosbag2

TOPIC = "/camera/image_raw"


class FakeClock:
    def __init__(self) -> None:
        self.now = 5_000_000_000

    def __call__(self) -> int:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += int(round(seconds * 1e9))


def replay(uri: str, base, **replay_keys):
    """Every frame of a source: (index, stamp, frame id, t_capture, image copy), and the stream's counters."""
    stream = FrameStream(open_reader(uri, base), Replay(**replay_keys))
    with stream:
        out = [(f.index, f.stamp_ns, f.frame_id, f.t_capture_ns, f.image.copy()) for f in stream]
    return out, stream.counters


def expected(image: np.ndarray, encoding: str) -> np.ndarray:
    """What the source must hand out for `image` recorded as `encoding` (a JPEG as OpenCV decodes it)."""
    if encoding == "mono8":
        return cv2.cvtColor(image, cv2.COLOR_BGR2GRAY)
    if encoding in ("jpeg", "png"):
        fields, _ = payload(image, encoding)
        return cv2.imdecode(np.frombuffer(fields["data"], np.uint8), cv2.IMREAD_COLOR)
    return image


@pytest.mark.parametrize("encoding", ["bgr8", "rgb8", "mono8", "jpeg", "png"])
def test_an_mcap_topic_reads_back_frame_for_frame_and_stamp_for_stamp(tmp_path, encoding):
    images, times = frames(8), stamps(8, period_ms=33.3)
    write_mcap(tmp_path / "drive.mcap", images, times, encoding=encoding)
    out, counters = replay(f"mcap://drive.mcap?topic={TOPIC}", tmp_path)
    assert [o[1] for o in out] == times and {o[2] for o in out} == {"camera_front"}
    for (_, _, _, _, image), original in zip(out, images, strict=True):
        assert np.array_equal(image, expected(original, encoding))
    assert (counters.delivered, counters.corrupt, counters.lost, counters.out_of_order) == (8, 0, 0, 0)


@pytest.mark.parametrize("encoding", ["rgb8", "jpeg"])
def test_a_rosbag2_sqlite_topic_reads_back_frame_for_frame_and_stamp_for_stamp(tmp_path, encoding):
    images, times = frames(6), stamps(6, period_ms=100)
    write_rosbag2(tmp_path / "bag", images, times, encoding=encoding, frame_id="cam_left")
    out, counters = replay(f"rosbag2://bag?topic={TOPIC}", tmp_path)
    assert [o[1] for o in out] == times and {o[2] for o in out} == {"cam_left"}
    for (_, _, _, _, image), original in zip(out, images, strict=True):
        assert np.array_equal(image, expected(original, encoding))
    assert counters.delivered == 6 and counters.corrupt == 0
    reader = open_reader(f"rosbag2://bag?topic={TOPIC}", tmp_path)
    with reader:
        assert reader.frame_count == 6 and reader.nominal_fps == pytest.approx(10.0)


def test_the_recorded_pace_puts_each_frame_at_its_stamp_and_a_stamp_that_goes_back_at_once(tmp_path):
    offsets_ms = [0, 40, 100, 90, 300, 310]  # the fourth frame is stamped before the third
    times = [T0_NS + int(ms * 1e6) for ms in offsets_ms]
    write_mcap(tmp_path / "drive.mcap", frames(6), times)
    clock = FakeClock()
    stream = FrameStream(open_reader(f"mcap://drive.mcap?topic={TOPIC}", tmp_path), Replay(pace="recorded"), clock=clock, sleep=clock.sleep)
    start = clock.now
    with stream:
        due = [(f.t_capture_ns - start) / 1e6 for f in stream]
    assert due == [0, 40, 100, 100, 300, 310]  # the late-stamped frame is due at once, never before the frame before it
    assert stream.counters.out_of_order == 1 and "stamped 10.000 ms before the frame before it" in stream.counters.out_of_order_last


def test_the_recorded_pace_holds_in_real_time(tmp_path):
    times = stamps(7, period_ms=50)  # 300 ms from the first frame to the last
    write_mcap(tmp_path / "drive.mcap", frames(7), times)
    began = time.monotonic()
    out, _ = replay(f"mcap://drive.mcap?topic={TOPIC}", tmp_path, pace="recorded")
    took = time.monotonic() - began
    assert len(out) == 7 and 0.3 <= took < 0.9  # never early; within 3x of the recorded span on a busy machine
    assert [o[3] - out[0][3] for o in out] == [t - times[0] for t in times]  # each frame's capture time is its due time


def test_late_frames_drop_takes_the_newest_frame_on_the_recorded_pace(tmp_path):
    write_mcap(tmp_path / "drive.mcap", frames(9), stamps(9, period_ms=50))
    clock = FakeClock()
    stream = FrameStream(
        open_reader(f"mcap://drive.mcap?topic={TOPIC}", tmp_path), Replay(pace="recorded", late_frames="drop"), clock=clock, sleep=clock.sleep
    )
    seen = []
    with stream:
        for frame in stream:
            seen.append(frame.index)
            clock.now += 120_000_000  # 120 ms a frame against 50 ms between them
    # frame 1 is stale at 120 ms (frame 2 due at 100), 3 at 240, 5 and 6 at 360 (frame 7 due at 350); the last one has no successor
    assert seen == [0, 2, 4, 7, 8] and stream.counters.dropped == 4


def test_a_hole_in_the_stamps_is_counted_as_lost_frames(tmp_path):
    times = [t for i, t in enumerate(stamps(30, period_ms=50)) if i not in (10, 11, 12)]
    write_mcap(tmp_path / "drive.mcap", frames(27), times)
    out, counters = replay(f"mcap://drive.mcap?topic={TOPIC}", tmp_path)
    assert len(out) == 27 and counters.lost == 3
    assert counters.lost_last == "3 frame(s) missing between 0.450 s and 0.650 s (a hole in the timestamps)"


def test_a_topic_not_in_the_recording_lists_the_image_topics_that_are(tmp_path):
    rear = (frames(3), stamps(3), "jpeg")
    write_mcap(tmp_path / "drive.mcap", frames(3), stamps(3), extra_topics={"/rear/image/compressed": rear})
    with pytest.raises(SourceError) as caught, open_reader("mcap://drive.mcap?topic=/front/image", tmp_path):
        pass
    assert caught.value.message == (
        "mcap://" + str(tmp_path / "drive.mcap") + ": topic '/front/image' is not in the recording; its image topics: "
        "/camera/image_raw (sensor_msgs/msg/Image), /rear/image/compressed (sensor_msgs/msg/CompressedImage)"
    )
    write_rosbag2(tmp_path / "bag", frames(2), stamps(2))
    with pytest.raises(SourceError, match=r"topic '/nope' is not in the recording; its image topics: /camera/image_raw \(sensor_msgs/msg/Image\)$"):
        open_reader("rosbag2://bag?topic=/nope", tmp_path).open()


def test_both_cameras_of_one_recording_read_their_own_topic(tmp_path):
    rear_images = [255 - f for f in frames(4)]
    write_mcap(tmp_path / "drive.mcap", frames(4), stamps(4), extra_topics={"/rear/image": (rear_images, stamps(4, t0=T0_NS + 7), "bgr8")})
    rear, _ = replay("mcap://drive.mcap?topic=/rear/image", tmp_path)
    assert [o[1] for o in rear] == stamps(4, t0=T0_NS + 7)
    assert all(np.array_equal(o[4], image) for o, image in zip(rear, rear_images, strict=True))


# BGR colours a camera sees, each an 8 x 8 block (every 2 x 2 chroma sample within one colour).
KNOWN = [(0, 0, 255), (0, 255, 0), (255, 0, 0), (255, 255, 255), (128, 128, 128), (0, 255, 255), (255, 0, 255), (40, 90, 200), (16, 16, 16)]


def colour_blocks(shift: int = 0) -> np.ndarray:
    image = np.zeros((24, 24, 3), np.uint8)
    for i, colour in enumerate(KNOWN[shift:] + KNOWN[:shift]):
        image[(i // 3) * 8 : (i // 3) * 8 + 8, (i % 3) * 8 : (i % 3) * 8 + 8] = colour
    return image


def test_yuv_frames_read_back_in_their_known_colours(tmp_path):
    images = [colour_blocks(0), colour_blocks(4)]
    for encoding in ("yuv422", "yuv422_yuy2", "nv12"):  # the byte orders differ: a swapped one reads other colours
        write_mcap(tmp_path / f"{encoding}.mcap", images, stamps(2), encoding=encoding)
        out, counters = replay(f"mcap://{encoding}.mcap?topic={TOPIC}", tmp_path)
        assert counters.delivered == 2 and counters.corrupt == 0
        for (_, _, _, _, image), original in zip(out, images, strict=True):
            assert image.shape == (24, 24, 3)
            error = np.abs(image.astype(int) - original.astype(int)).max()
            assert error <= 3, f"{encoding}: off by {error} of 255"
    write_rosbag2(tmp_path / "bag", images, stamps(2), encoding="nv12")
    out, _ = replay(f"rosbag2://bag?topic={TOPIC}", tmp_path)
    assert all(np.abs(o[4].astype(int) - image.astype(int)).max() <= 3 for o, image in zip(out, images, strict=True))


def test_a_yuv_frame_of_an_odd_size_is_one_corrupt_frame(tmp_path):
    images = [frames(3, width=64, height=48)[0], np.zeros((48, 63, 3), np.uint8), frames(3, width=64, height=48)[2]]
    path = tmp_path / "odd.mcap"
    from tests.sdk.sources import bags

    original = bags.yuv
    try:  # the odd frame's bytes as a camera would pack them: its last column's chroma pair cut short
        bags.yuv = lambda image, enc: original(image, enc) if image.shape[1] % 2 == 0 else np.zeros((48, 63, 2), np.uint8)
        write_mcap(path, images, stamps(3), encoding="yuv422")
    finally:
        bags.yuv = original
    out, counters = replay(f"mcap://odd.mcap?topic={TOPIC}", tmp_path)
    assert len(out) == 2 and counters.corrupt == 1
    assert counters.corrupt_last.endswith("frame 1: 63x48 yuv422: an odd width; allowed: even for yuv422")


def test_an_encoding_the_sdk_does_not_read_is_refused_by_name(tmp_path):
    write_mcap(tmp_path / "drive.mcap", frames(2), stamps(2), encoding="bayer_rggb8")
    with pytest.raises(SourceError) as caught:
        open_reader(f"mcap://drive.mcap?topic={TOPIC}", tmp_path).open()
    allowed = "bgr8, rgb8, mono8, yuv422, uyvy, yuv422_yuy2, yuyv, nv12"
    assert caught.value.message.endswith(f"?topic={TOPIC}: sensor_msgs/msg/Image encoding 'bayer_rggb8'; allowed: {allowed}")


@pytest.mark.parametrize("encoding", ["bgr8", "png"])  # PNG: decoded ahead on threads, still every frame before the damage
def test_a_truncated_mcap_delivers_the_frames_before_the_damage_and_reports_it(tmp_path, encoding):
    times = stamps(10)
    noise = [np.random.default_rng(i).integers(0, 256, (48, 64, 3), np.uint8) for i in range(10)]  # incompressible: the frames fill the file
    path = write_mcap(tmp_path / "drive.mcap", noise, times, chunk_size=1, encoding=encoding)  # a chunk per message
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * 0.6)])
    out, counters = replay(f"mcap://drive.mcap?topic={TOPIC}", tmp_path)
    assert 3 <= len(out) < 10 and [o[1] for o in out] == times[: len(out)]
    assert all(np.array_equal(o[4], image) for o, image in zip(out, noise, strict=False))
    assert counters.corrupt == 1 and f"the recording is damaged after {len(out)} frame(s)" in counters.corrupt_last


def test_bytes_overwritten_inside_an_mcap_end_the_stream_at_the_damaged_chunk_and_report_it(tmp_path):
    times = stamps(10)
    noise = [np.random.default_rng(i).integers(0, 256, (48, 64, 3), np.uint8) for i in range(10)]
    path = write_mcap(tmp_path / "drive.mcap", noise, times, chunk_size=1)  # a chunk per message, each with its CRC
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 64] = b"\xab" * 64  # inside a frame's pixels: without the CRC it would be a frame of wrong pixels
    path.write_bytes(bytes(data))
    out, counters = replay(f"mcap://drive.mcap?topic={TOPIC}", tmp_path)
    assert 2 <= len(out) < 10 and all(np.array_equal(o[4], image) for o, image in zip(out, noise, strict=False))
    assert counters.corrupt == 1 and f"the recording is damaged after {len(out)} frame(s): CRCValidationError" in counters.corrupt_last


def test_uri_mistakes_are_one_error_each(tmp_path):
    with pytest.raises(SourceError, match="no topic= given"):
        open_reader("mcap://drive.mcap", tmp_path)
    with pytest.raises(SourceError, match="2 topic= parameters; one reader reads one camera topic"):
        parse_source_uri("mcap://drive.mcap?topic=/a&topic=/b", tmp_path)
    with pytest.raises(SourceError, match=r"is not a file"):
        open_reader(f"mcap://missing.mcap?topic={TOPIC}", tmp_path).open()
    with pytest.raises(SourceError, match=r"is not a folder"):
        open_reader(f"rosbag2://missing?topic={TOPIC}", tmp_path).open()
    with pytest.raises(ValidationError, match="allowed: exactly one topic="):
        Source(uri="rosbag2://bag")
    with pytest.raises(ValidationError, match="replay.pace recorded with a file:// source"):
        Source(uri="file://clip.avi", replay={"pace": "recorded"})
    with pytest.raises(ValidationError, match="allowed: one of them"):
        Source(uri=f"mcap://d.mcap?topic={TOPIC}", replay={"pace": "recorded", "rate_fps": 30})


def test_a_missing_package_is_named_with_its_install_line(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "mcap.reader", None)  # import mcap.reader raises ImportError
    with pytest.raises(MissingDependencyError) as caught:
        open_reader(f"mcap://drive.mcap?topic={TOPIC}", tmp_path)
    assert caught.value.message.startswith("source mcap:// needs the Python package mcap: the Python module 'mcap.reader' is not installed")
    assert "pip install 'mcap'" in caught.value.hint


def test_the_sdk_imports_and_loads_such_pipelines_without_the_recording_packages():
    blocked = ["mcap", "mcap_ros2", "rosbags", "foxglove"]
    code = (
        "import sys\n"
        f"for name in {blocked!r}: sys.modules[name] = None\n"
        "import sdk, sdk.sources, sdk.sinks, sdk.spec, sdk.sources.stream, sdk.sinks.mcap_sink, sdk.sinks.live_view\n"
        "from sdk.spec.source import Source\n"
        "Source(uri='mcap://drive.mcap?topic=/camera/image_raw', replay={'pace': 'recorded'})\n"
        "from sdk.errors import MissingDependencyError\n"
        "try:\n"
        "    sdk.sinks.mcap_sink.McapSink('never-written.mcap').open()\n"
        "except MissingDependencyError as exc:\n"
        "    print(exc.message)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("the mcap sink needs the Python package foxglove-sdk: the Python module 'foxglove' is not installed")


def test_foxglove_images_in_an_mcap_read_back_with_their_timestamps(tmp_path):
    pytest.importorskip("mcap_protobuf", reason="Foxglove's protobuf images need mcap-protobuf-support")
    import foxglove
    from foxglove.channels import CompressedImageChannel, RawImageChannel

    from sdk.sinks.mcap_sink import message_classes

    m = message_classes(foxglove)
    images, times = frames(4), stamps(4, period_ms=25)
    context = foxglove.Context()
    writer = foxglove.open_mcap(str(tmp_path / "fox.mcap"), context=context)
    raw, jpeg = RawImageChannel("/raw", context=context), CompressedImageChannel("/jpeg", context=context)
    uyvy = RawImageChannel("/uyvy", context=context)  # Foxglove's name of ROS's yuv422
    for image, stamp in zip(images, times, strict=True):
        ts = m.Timestamp(sec=stamp // 1_000_000_000, nsec=stamp % 1_000_000_000)
        rgb = np.ascontiguousarray(image[:, :, ::-1])
        raw.log(m.RawImage(timestamp=ts, frame_id="fox", width=64, height=48, encoding="rgb8", step=192, data=rgb.tobytes()), log_time=stamp)
        packed = payload(colour_blocks(), "yuv422")[0]["data"]
        uyvy.log(m.RawImage(timestamp=ts, frame_id="fox", width=24, height=24, encoding="uyvy", step=48, data=packed), log_time=stamp)
        jpeg.log(m.CompressedImage(timestamp=ts, frame_id="fox", data=payload(image, "jpeg")[0]["data"], format="jpeg"), log_time=stamp)
    writer.close()
    for topic, encoding in (("/raw", "bgr8"), ("/jpeg", "jpeg")):
        out, _ = replay(f"mcap://fox.mcap?topic={topic}", tmp_path)
        assert [o[1] for o in out] == times and {o[2] for o in out} == {"fox"}
        assert all(np.array_equal(o[4], expected(image, encoding)) for o, image in zip(out, images, strict=True))
    out, _ = replay("mcap://fox.mcap?topic=/uyvy", tmp_path)
    assert len(out) == 4 and np.abs(out[0][4].astype(int) - colour_blocks().astype(int)).max() <= 3


def test_the_service_status_says_when_a_recordings_stamps_went_back():
    from types import SimpleNamespace

    from sdk.service.serve import live_status
    from sdk.sources import StreamCounters

    runner = SimpleNamespace(counters=StreamCounters(), stream=None, sinks=None)
    assert "out_of_order_stamps" not in live_status(runner)  # a video's status as it always was
    runner.counters = StreamCounters(out_of_order=2, out_of_order_last="frame 7 of /cam is stamped 3.000 ms before the frame before it")
    status = live_status(runner)
    assert (status["out_of_order_stamps"], status["out_of_order_last"]) == (2, runner.counters.out_of_order_last)


@pytest.mark.parametrize("container", ["mcap", "rosbag2"])
def test_a_message_that_does_not_decode_is_one_corrupt_frame_and_the_next_is_read(tmp_path, container):
    images, times = frames(6), stamps(6)
    if container == "mcap":
        write_mcap(tmp_path / "drive.mcap", images, times, garbage_at=(2,))
        uri = f"mcap://drive.mcap?topic={TOPIC}"
    else:
        write_rosbag2(tmp_path / "bag", images, times, garbage_at=(2,))
        uri = f"rosbag2://bag?topic={TOPIC}"
    out, counters = replay(uri, tmp_path)
    assert [o[1] for o in out] == [t for i, t in enumerate(times) if i != 2]
    assert all(np.array_equal(o[4], image) for o, image in zip(out, [im for i, im in enumerate(images) if i != 2], strict=True))
    assert (counters.corrupt, counters.lost) == (1, 0)
    where = f"mcap://{tmp_path / 'drive.mcap'}" if container == "mcap" else f"rosbag2://{tmp_path / 'bag'}"
    assert counters.corrupt_last.startswith(f"{where}?topic={TOPIC}: frame 2: ")
    assert "sensor_msgs/msg/Image message of 6 bytes does not decode" in counters.corrupt_last
