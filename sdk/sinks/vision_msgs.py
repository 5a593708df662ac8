"""detections.mcap in ROS 2 messages: each frame's detections as `vision_msgs/msg/Detection2DArray` (and, with
`images: true`, the frame as `sensor_msgs/msg/CompressedImage`), CDR-encoded with `ros2msg` schemas by the
`mcap-ros2-support` writer, for stacks that replay the file into ROS 2 (`ros2 bag play`) or read it with ROS tools.

The message definitions are vision_msgs 4 (ROS 2 Humble and later: the box's centre a `vision_msgs/Pose2D`), written
out here as the `ros2msg` schema text a bag recorder stores. A box is its centre and size in source pixels; its
hypothesis the label as `class_id` and the score; `id` the track id where the pipeline tracks (else empty).
"""

from __future__ import annotations

from sdk.frame import Frame
from sdk.postprocess.detections import Detections

DETECTION2D_ARRAY = "vision_msgs/msg/Detection2DArray"
COMPRESSED_IMAGE = "sensor_msgs/msg/CompressedImage"
_SEP = "=" * 80
_HEADER = f"""{_SEP}
MSG: std_msgs/Header
builtin_interfaces/Time stamp
string frame_id
{_SEP}
MSG: builtin_interfaces/Time
int32 sec
uint32 nanosec"""
DETECTION2D_ARRAY_DEF = f"""std_msgs/Header header
vision_msgs/Detection2D[] detections
{_HEADER}
{_SEP}
MSG: vision_msgs/Detection2D
std_msgs/Header header
vision_msgs/ObjectHypothesisWithPose[] results
vision_msgs/BoundingBox2D bbox
string id
{_SEP}
MSG: vision_msgs/ObjectHypothesisWithPose
vision_msgs/ObjectHypothesis hypothesis
geometry_msgs/PoseWithCovariance pose
{_SEP}
MSG: vision_msgs/ObjectHypothesis
string class_id
float64 score
{_SEP}
MSG: geometry_msgs/PoseWithCovariance
geometry_msgs/Pose pose
float64[36] covariance
{_SEP}
MSG: geometry_msgs/Pose
geometry_msgs/Point position
geometry_msgs/Quaternion orientation
{_SEP}
MSG: geometry_msgs/Point
float64 x
float64 y
float64 z
{_SEP}
MSG: geometry_msgs/Quaternion
float64 x
float64 y
float64 z
float64 w
{_SEP}
MSG: vision_msgs/BoundingBox2D
vision_msgs/Pose2D center
float64 size_x
float64 size_y
{_SEP}
MSG: vision_msgs/Pose2D
vision_msgs/Point2D position
float64 theta
{_SEP}
MSG: vision_msgs/Point2D
float64 x
float64 y"""
COMPRESSED_IMAGE_DEF = f"std_msgs/Header header\nstring format\nuint8[] data\n{_HEADER}"
_NO_POSE = {"pose": {"position": {"x": 0.0, "y": 0.0, "z": 0.0}, "orientation": {"x": 0.0, "y": 0.0, "z": 0.0, "w": 1.0}}, "covariance": [0.0] * 36}


def header(stamp: int, frame_id: str) -> dict:
    return {"stamp": {"sec": stamp // 1_000_000_000, "nanosec": stamp % 1_000_000_000}, "frame_id": frame_id}


def detection_array(frame: Frame, detections: Detections, stamp: int) -> dict:
    """A frame's detections as a vision_msgs/msg/Detection2DArray (a dict the mcap-ros2 writer serializes)."""
    head = header(stamp, frame.frame_id or frame.camera or "camera")
    boxes = []
    for d in detections:
        x1, y1, x2, y2 = (float(v) for v in d.box)
        boxes.append(
            {
                "header": head,
                "results": [{"hypothesis": {"class_id": str(d.label), "score": float(d.score)}, "pose": _NO_POSE}],
                "bbox": {"center": {"position": {"x": (x1 + x2) / 2, "y": (y1 + y2) / 2}, "theta": 0.0}, "size_x": x2 - x1, "size_y": y2 - y1},
                "id": str(d.track_id) if d.track_id is not None else "",
            }
        )
    return {"header": head, "detections": boxes}


class Ros2Writer:
    """The ROS 2 flavour of the mcap sink's file: schemas registered once, a channel a topic (the writer's own)."""

    def __init__(self, handle) -> None:
        from mcap_ros2.writer import Writer

        self._writer = Writer(handle)
        self._detections = self._writer.register_msgdef(DETECTION2D_ARRAY, DETECTION2D_ARRAY_DEF)
        self._images = None

    def log_detections(self, topic: str, frame: Frame, detections: Detections, stamp: int) -> None:
        self._writer.write_message(topic, self._detections, detection_array(frame, detections, stamp), log_time=stamp, publish_time=stamp)

    def log_image(self, topic: str, jpeg: bytes, stamp: int, frame_id: str) -> None:
        if self._images is None:
            self._images = self._writer.register_msgdef(COMPRESSED_IMAGE, COMPRESSED_IMAGE_DEF)
        message = {"header": header(stamp, frame_id), "format": "jpeg", "data": jpeg}
        self._writer.write_message(topic, self._images, message, log_time=stamp, publish_time=stamp)

    def finish(self) -> None:
        self._writer.finish()
