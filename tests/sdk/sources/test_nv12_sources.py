"""Sources that deliver NV12: the replay hook (`file://...?format=nv12`), Argus with `format=nv12`, GStreamer caps
(format and colorimetry, GStreamer's own defaults), the live capture's buffer pool, and the load-time checks."""

from __future__ import annotations

import time

import cv2
import numpy as np
import pytest

from sdk.errors import ConfigError, SourceError
from sdk.pixels import Nv12Image, YuvColour
from sdk.sources import FrameReader, FrameStream, open_reader
from sdk.sources.gst_caps import appsink_caps, caps_deliver_nv12, colour_from_colorimetry
from sdk.sources.opencv_capture import argus_pipeline
from sdk.spec.schema import Replay


def test_file_replayed_as_nv12_is_opencvs_bt601_conversion_of_each_frame(video_path):
    reader = open_reader(f"file://{video_path.name}?format=nv12", video_path.parent)
    capture = cv2.VideoCapture(str(video_path))
    with reader:
        assert reader.pixel_format == "nv12"
        first = reader.read()
        _, bgr = capture.read()
        i420 = cv2.cvtColor(bgr, cv2.COLOR_BGR2YUV_I420)
        h, w = bgr.shape[:2]
        assert isinstance(first, Nv12Image) and first.shape == bgr.shape and first.colour == YuvColour()
        assert np.array_equal(first.y, i420[:h])
        assert np.array_equal(first.uv[..., 0].reshape(-1), i420[h:].reshape(-1)[: h * w // 4])
        second = reader.read()
        assert second is first  # converted into the same buffers: nothing allocated per frame
    capture.release()


def test_argus_nv12_pipeline_hands_nv12_to_appsink_without_a_cpu_conversion():
    text = argus_pipeline(0, 1920, 1080, 30, nv12=True)
    assert "videoconvert" not in text and caps_deliver_nv12(text)
    assert colour_from_colorimetry(appsink_caps(text).get("colorimetry"), 1080, "csi") == YuvColour("bt601", "limited")
    assert "videoconvert" in argus_pipeline(0, 1920, 1080, 30) and not caps_deliver_nv12(argus_pipeline(0, 1920, 1080, 30))


@pytest.mark.parametrize(
    ("pipeline", "nv12"),
    [
        ("nvv4l2decoder ! nvvidconv ! video/x-raw,format=NV12 ! appsink", True),
        ("v4l2src ! video/x-raw, format=(string)NV12, width=(int)640 ! appsink drop=true", True),
        ("videotestsrc ! video/x-raw,format=BGR ! appsink", False),
        ("videotestsrc ! videoconvert ! appsink", False),
    ],
)
def test_the_caps_before_appsink_decide(pipeline, nv12):
    assert caps_deliver_nv12(pipeline) is nv12
    assert open_reader(f"gst://{pipeline}").pixel_format == ("nv12" if nv12 else "bgr")


def test_colorimetry_names_numbers_and_gstreamers_defaults():
    """GStreamer's video-info.c (set_default_colorimetry): YUV up to 576 rows BT.601, taller BT.709, both limited."""
    assert colour_from_colorimetry(None, 576, "x") == YuvColour("bt601", "limited")
    assert colour_from_colorimetry(None, 720, "x") == YuvColour("bt709", "limited")
    assert colour_from_colorimetry("bt709", 480, "x") == YuvColour("bt709", "limited")
    assert colour_from_colorimetry("1:4:0:0", 1080, "x") == YuvColour("bt601", "full")  # JPEG-style full range
    assert colour_from_colorimetry("2:3:5:1", 1080, "x") == YuvColour("bt709", "limited")
    assert appsink_caps("src ! video/x-raw,format=NV12,colorimetry=(string)1:3:5:1 ! appsink")["colorimetry"] == "1:3:5:1"
    with pytest.raises(SourceError, match="bt2020"):
        colour_from_colorimetry("bt2020", 2160, "x")
    with pytest.raises(SourceError, match="BT.2020"):
        colour_from_colorimetry(None, 2160, "x")


def test_nv12_from_opencvs_gstreamer_buffer_takes_the_caps_colour():
    """What read() does with the (H*3/2) x W Mat OpenCV returns for NV12 caps (no GStreamer in this OpenCV)."""
    reader = open_reader("gst://src ! video/x-raw,format=NV12,colorimetry=bt709 ! appsink")
    frame = reader._as_nv12(np.zeros((720 * 3 // 2, 1280), np.uint8))
    assert frame.shape == (720, 1280, 3) and frame.colour == YuvColour("bt709", "limited")


@pytest.mark.parametrize(
    ("uri", "message"),
    [("file://clip.avi?format=yuv", "format='yuv'"), ("v4l2:///dev/video0?format=nv12", "format=nv12")],
)
def test_a_bad_format_is_refused_at_load(tmp_path, uri, message):
    from pathlib import Path

    from sdk.spec import load_pipeline

    example = Path(__file__).resolve().parents[3] / "pipelines" / "pedestrian.yaml"
    path = tmp_path / "p.yaml"
    path.write_text(example.read_text().replace("uri: file://assets/vtest.avi", f"uri: {uri}"))
    with pytest.raises(ConfigError) as caught:
        load_pipeline(path, check_files=False)
    assert message in str(caught.value) and "source.uri" in str(caught.value) and "p.yaml" in str(caught.value)


class _Nv12Camera(FrameReader):
    """A live camera delivering NV12 faster than the consumer takes it (as OpenCV's GStreamer backend would)."""

    live = True

    def __init__(self, frames: int) -> None:
        self.frames, self.sent = frames, 0
        self.buffer = Nv12Image.empty(8, 4)

    def open(self) -> None:
        self.sent = 0

    def read(self):
        if self.sent >= self.frames:
            return None
        self.buffer.y[...] = self.sent % 256
        self.buffer.uv[...] = 128
        self.sent += 1
        time.sleep(0.001)
        return self.buffer

    def close(self) -> None:
        pass


def test_live_nv12_frames_rotate_through_the_buffer_pool():
    stream = FrameStream(_Nv12Camera(100), Replay())
    seen = []
    with stream:
        for frame in stream:
            assert isinstance(frame.image, Nv12Image) and frame.image is not stream.reader.buffer
            assert int(frame.image.y[0, 0]) == frame.index % 256  # the pool buffer holds this frame's pixels
            seen.append(frame.index)
            time.sleep(0.005)
    assert seen == sorted(seen) and stream.counters.delivered + stream.counters.dropped == 100
