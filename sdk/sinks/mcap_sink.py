"""detections.mcap: each frame's detections as a `foxglove.ImageAnnotations` message, for Foxglove (and anything that
reads MCAP) to draw over the camera.

One message per frame on `topic` (several cameras: `topic/NAME`), logged at the frame's time: a recording's own
stamp where the source has one (mcap://, rosbag2://: the annotations land on the image they belong to), else the
wall-clock time the frame was captured or due. Each box is a closed line (`LINE_LOOP`) in source pixels, its label
and score (and track id where the pipeline tracks) a text at its top-left corner; the message's metadata names the
frame id, the frame number and the camera. `images: true` also writes the frame itself as a JPEG
`foxglove.CompressedImage` on `image_topic`, so the file opens alone.

The schemas and the writer are the `foxglove-sdk` package's (protobuf encoding, the schema in the file). With
`messages: vision_msgs` the same frames are ROS 2 messages instead (`vision_msgs/msg/Detection2DArray`, images as
`sensor_msgs/msg/CompressedImage`; sdk/sinks/vision_msgs.py). The file is written as `.NAME.partial` and renamed
into place when the run ends, like the JSONL sink's.
"""

from __future__ import annotations

import time
from pathlib import Path

from sdk.errors import SdkError
from sdk.frame import Frame
from sdk.optional import need
from sdk.postprocess.detections import Detections
from sdk.sinks.files import OutputStats, describe_output, partial_path, publish

PALETTE = ((0.95, 0.26, 0.21), (0.13, 0.59, 0.95), (0.30, 0.69, 0.31), (1.0, 0.76, 0.03), (0.61, 0.15, 0.69), (0.0, 0.74, 0.83))
JPEG_QUALITY = 85


class McapSink:
    name = "mcap"

    def __init__(
        self,
        path: Path,
        *,
        topic: str = "/detections",
        images: bool = False,
        image_topic: str = "/camera/image/compressed",
        cameras: list[str] | None = None,
        messages: str = "foxglove",
        latency: bool = False,
    ) -> None:
        self.path = Path(path)
        self.messages = messages  # "foxglove" (foxglove.ImageAnnotations) or "vision_msgs" (ROS 2 Detection2DArray)
        self.topic, self.images, self.image_topic = topic, images, image_topic
        self.cameras = cameras or []
        self.stats = OutputStats(self.path.name)
        self._partial = partial_path(self.path)
        self._writer = None
        self._channels: dict[str | None, object] = {}
        self._image_channels: dict[str | None, object] = {}
        self._epoch_offset = 0
        self._last_index: int | None = None
        self._classes: dict[str, int] = {}
        self.latency = self.takes_marks = latency  # each frame's latency record on /latency (SinkGroup.timed)
        self._latency: dict[str | None, object] = {}
        self._counter = None
        self._ros2 = None  # messages: vision_msgs: the ROS 2 writer (sdk/sinks/vision_msgs.py) and its file
        self._handle = None

    def _topic(self, base: str, frame: Frame) -> str:
        return f"{base}/{frame.camera}" if self.cameras else base

    def open(self) -> None:
        if self.messages == "vision_msgs":
            self._open_ros2()
            return
        foxglove = need("foxglove", "foxglove-sdk", "the mcap sink")
        self._fox = message_classes(foxglove)
        from foxglove.channels import CompressedImageChannel, ImageAnnotationsChannel

        self.path.parent.mkdir(parents=True, exist_ok=True)
        # This sink's own context (nothing else logged in the process lands in its file), kept: its channels live with it.
        context = self._context = foxglove.Context()
        try:
            self._writer = foxglove.open_mcap(str(self._partial), allow_overwrite=True, context=context)
        except Exception as exc:  # noqa: BLE001 - foxglove's FoxgloveError and OSError alike
            raise SdkError(f"mcap sink: cannot write {self.path}: {exc}") from None
        names = self.cameras or [None]
        for camera in names:
            suffix = f"/{camera}" if camera is not None else ""
            self._channels[camera] = ImageAnnotationsChannel(f"{self.topic}{suffix}", context=context)
            if self.images:
                self._image_channels[camera] = CompressedImageChannel(f"{self.image_topic}{suffix}", context=context)
            if self.latency:
                from sdk.sinks.latency_record import SCHEMA_NAME, MissCounter, schema_bytes

                schema = foxglove.Schema(name=SCHEMA_NAME, encoding="jsonschema", data=schema_bytes())
                self._latency[camera] = foxglove.Channel(f"/latency{suffix}", schema=schema, message_encoding="json", context=context)
                self._counter = self._counter or MissCounter()
        # A frame without a recorded stamp is logged at the wall-clock time it was captured (t_capture_ns is monotonic).
        self._epoch_offset = time.time_ns() - time.monotonic_ns()

    def _open_ros2(self) -> None:
        need("mcap_ros2.writer", "mcap-ros2-support", "the mcap sink (messages: vision_msgs)")
        from sdk.sinks.vision_msgs import Ros2Writer

        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._handle = open(self._partial, "wb")  # noqa: SIM115 - kept open for the run, closed by close()
        except OSError as exc:
            raise SdkError(f"mcap sink: cannot write {self.path}: {exc.strerror}") from None
        self._ros2 = self._writer = Ros2Writer(self._handle)
        self._epoch_offset = time.time_ns() - time.monotonic_ns()

    def stamp_of(self, frame: Frame) -> int:
        return frame.stamp_ns if frame.stamp_ns is not None else frame.t_capture_ns + self._epoch_offset

    def write(self, frame: Frame, detections: Detections) -> None:
        if self._writer is None:
            self.stats.lost("the file is not open")
            return
        stamp = self.stamp_of(frame)
        try:
            if self._ros2 is not None:
                self._ros2.log_detections(self._topic(self.topic, frame), frame, detections, stamp)
            else:
                message = annotations(self._fox, frame, detections, stamp, self._classes)
                self._channels[frame.camera if self.cameras else None].log(message, log_time=stamp)
            if self.images:
                self._log_image(frame, stamp)
        except Exception as exc:  # noqa: BLE001 - a write error (a full disk) is this frame's, counted; the next frame tries again
            self.stats.lost(f"{type(exc).__name__}: {exc}")
            return
        self._last_index = frame.index
        self.stats.ok()

    def watch(self, status, deadlines: dict) -> None:
        if self._counter is not None:
            self._counter.deadlines = deadlines

    def timed(self, frame: Frame, marks: list[int]) -> None:
        """A frame's latency record (`latency: true`), after its marks are complete, on the frame's own time."""
        if self._writer is None or self._counter is None:
            return
        from sdk.sinks.latency_record import record

        camera = frame.camera if self.cameras else None
        try:
            self._latency[camera].log(record(frame, marks, *self._counter.count(camera, marks)), log_time=self.stamp_of(frame))
        except Exception as exc:  # noqa: BLE001 - like a write: counted, the next frame tries again
            self.stats.lost(f"latency record: {type(exc).__name__}: {exc}")

    def _log_image(self, frame: Frame, stamp: int) -> None:
        import cv2

        image = frame.image.to_bgr() if hasattr(frame.image, "to_bgr") else frame.image
        ok, data = cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, JPEG_QUALITY])
        if not ok:
            raise ValueError("JPEG encoding failed")
        if self._ros2 is not None:
            self._ros2.log_image(self._topic(self.image_topic, frame), data.tobytes(), stamp, frame.frame_id or frame.camera or "camera")
            return
        m = self._fox
        message = m.CompressedImage(
            timestamp=m.Timestamp(sec=stamp // 1_000_000_000, nsec=stamp % 1_000_000_000),
            frame_id=frame.frame_id or frame.camera or "camera",
            data=data.tobytes(),
            format="jpeg",
        )
        self._image_channels[frame.camera if self.cameras else None].log(message, log_time=stamp)

    def close(self) -> None:
        if self._writer is None:
            return
        writer, self._writer = self._writer, None
        for channel in (*self._channels.values(), *self._image_channels.values(), *self._latency.values()):
            channel.close()
        try:
            if self._ros2 is not None:
                self._ros2 = None
                try:
                    writer.finish()
                finally:
                    self._handle.close()
            else:
                writer.close()
            publish(self._partial, self.path)
        except Exception as exc:  # noqa: BLE001
            self.stats.last_error = f"cannot finish {self.path.name}: {exc}"
            raise SdkError(f"mcap sink: cannot finish {self.path}: {exc}") from None
        self.stats.synced_frame = self._last_index  # the file is whole and in place: every frame written is on the disk

    def describe(self) -> dict:
        return describe_output(self.path, self.stats, None)


def annotations(m, frame: Frame, detections: Detections, stamp: int, classes: dict[str, int]):
    """A frame's detections as foxglove.ImageAnnotations (`m`: the message classes; `classes`: label -> colour index,
    filled as labels appear): a closed line per box in source pixels, a text per box, the frame's numbers as metadata."""
    timestamp = m.Timestamp(sec=stamp // 1_000_000_000, nsec=stamp % 1_000_000_000)
    points, texts = [], []
    for d in detections:
        x1, y1, x2, y2 = (float(v) for v in d.box)
        r, g, b = PALETTE[classes.setdefault(d.label, len(classes)) % len(PALETTE)]
        colour = m.Color(r=r, g=g, b=b, a=1.0)
        corners = [m.Point2(x=x1, y=y1), m.Point2(x=x2, y=y1), m.Point2(x=x2, y=y2), m.Point2(x=x1, y=y2)]
        loop = m.PointsAnnotationType.LineLoop
        points.append(m.PointsAnnotation(timestamp=timestamp, type=loop, points=corners, outline_color=colour, thickness=2.0))
        text = f"{d.label} {d.score:.2f}" + (f" #{d.track_id}" if d.track_id is not None else "")
        texts.append(
            m.TextAnnotation(
                timestamp=timestamp,
                position=m.Point2(x=x1, y=y1),
                text=text,
                font_size=14.0,
                text_color=m.Color(r=1.0, g=1.0, b=1.0, a=1.0),
                background_color=m.Color(r=r, g=g, b=b, a=0.8),
            )
        )
    metadata = [m.KeyValuePair(key="frame", value=str(frame.index))]
    if frame.frame_id is not None:
        metadata.append(m.KeyValuePair(key="frame_id", value=frame.frame_id))
    if frame.camera is not None:
        metadata.append(m.KeyValuePair(key="camera", value=frame.camera))
    return m.ImageAnnotations(points=points, texts=texts, metadata=metadata)


def message_classes(foxglove):
    """The message classes: `foxglove.messages` (foxglove-sdk 0.30 and later) or the older `foxglove.schemas`."""
    try:
        from foxglove import messages
    except ImportError:
        from foxglove import schemas as messages
    return messages
