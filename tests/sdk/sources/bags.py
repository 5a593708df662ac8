"""Recordings of a camera topic with known frames and stamps, written by the tests themselves: an MCAP file (the
`mcap-ros2-support` writer) and a rosbag2 folder (the `rosbags` writer, SQLite3 storage)."""

from __future__ import annotations

import heapq
from pathlib import Path

import cv2
import numpy as np

HEADER = """================================================================================
MSG: std_msgs/Header
builtin_interfaces/Time stamp
string frame_id
================================================================================
MSG: builtin_interfaces/Time
int32 sec
uint32 nanosec"""
IMAGE_DEF = "std_msgs/Header header\nuint32 height\nuint32 width\nstring encoding\nuint8 is_bigendian\nuint32 step\nuint8[] data\n" + HEADER
COMPRESSED_DEF = "std_msgs/Header header\nstring format\nuint8[] data\n" + HEADER
T0_NS = 1_700_000_000_123_000_000  # the first frame's stamp (a drive in November 2023)


def frames(count: int = 12, width: int = 64, height: int = 48) -> list[np.ndarray]:
    """`count` BGR frames, each telling its index (a bright square that moves, the index in the blue channel)."""
    out = []
    for i in range(count):
        image = np.zeros((height, width, 3), np.uint8)
        image[:, :, 0] = i * 7 % 256
        x = 4 + (i * 3) % (width - 16)
        image[10:22, x : x + 12] = (40, 200, 250)
        out.append(image)
    return out


def stamps(count: int, period_ms: float = 50.0, t0: int = T0_NS) -> list[int]:
    return [t0 + int(round(i * period_ms * 1e6)) for i in range(count)]


def payload(image: np.ndarray, encoding: str) -> tuple[dict, str]:
    """The message fields of `image` as `encoding` (rgb8, bgr8, mono8, yuv422, yuv422_yuy2, nv12 raw; jpeg, png compressed) and its
    type."""
    if encoding in ("jpeg", "png"):
        ok, data = cv2.imencode(".jpg" if encoding == "jpeg" else ".png", image, [cv2.IMWRITE_JPEG_QUALITY, 98] if encoding == "jpeg" else [])
        assert ok
        return {"format": encoding, "data": data.tobytes()}, "sensor_msgs/msg/CompressedImage"
    if encoding == "rgb8":
        pixels = image[:, :, ::-1]
    elif encoding == "mono8":
        pixels = cv2.cvtColor(image, cv2.COLOR_BGR2GRAY)
    elif encoding in ("yuv422", "yuv422_yuy2", "nv12"):
        pixels = yuv(image, encoding)
    else:
        pixels = image
    pixels = np.ascontiguousarray(pixels)
    height, width = image.shape[:2]
    step = pixels.strides[0]
    fields = {"height": height, "width": width, "encoding": encoding, "is_bigendian": 0, "step": step, "data": pixels.tobytes()}
    return fields, "sensor_msgs/msg/Image"


def yuv(image: np.ndarray, encoding: str) -> np.ndarray:
    """`image` (BGR, even width and height) as the bytes of a YUV encoding, by the BT.601 video-range formulas (not
    OpenCV's): yuv422 is UYVY, yuv422_yuy2 is YUYV (both a 2-byte pixel), nv12 a Y plane over interleaved U/V rows.
    Chroma is the mean of the pixels sharing it."""
    b, g, r = (image[:, :, i].astype(np.float64) / 255 for i in range(3))
    y = 16 + 65.481 * r + 128.553 * g + 24.966 * b
    u = 128 - 37.797 * r - 74.203 * g + 112.0 * b
    v = 128 + 112.0 * r - 93.786 * g - 18.214 * b
    height, width = y.shape
    y8 = np.clip(np.rint(y), 0, 255).astype(np.uint8)
    if encoding == "nv12":
        pairs = [np.clip(np.rint(c.reshape(height // 2, 2, width // 2, 2).mean(axis=(1, 3))), 0, 255).astype(np.uint8) for c in (u, v)]
        uv = np.stack(pairs, axis=-1).reshape(height // 2, width)
        return np.concatenate([y8, uv])
    u2, v2 = (np.clip(np.rint(c.reshape(height, width // 2, 2).mean(axis=2)), 0, 255).astype(np.uint8) for c in (u, v))
    out = np.empty((height, width, 2), np.uint8)
    luma, chroma = (1, 0) if encoding == "yuv422" else (0, 1)
    out[:, :, luma] = y8
    out[:, 0::2, chroma], out[:, 1::2, chroma] = u2, v2
    return out


def write_mcap(
    path: Path,
    images,
    stamp_list,
    topic: str = "/camera/image_raw",
    encoding: str = "bgr8",
    frame_id: str = "camera_front",
    extra_topics: dict | None = None,
    chunk_size: int = 1 << 20,
    garbage_at: tuple[int, ...] = (),
) -> Path:
    """An MCAP file of ROS 2 messages: `images` on `topic` with header stamps `stamp_list` (logged at the stamps too);
    `extra_topics` {topic: (images, stamps, encoding)} interleaved in log-time order; the messages of `topic` numbered
    in `garbage_at` (not the first) are bytes that do not decode."""
    from mcap_ros2.writer import Writer

    streams = [(topic, images, stamp_list, encoding)] + [(t, *v) for t, v in (extra_topics or {}).items()]
    # Merged by stamp, each topic in its own order (a stamp that goes back stays where it was recorded).
    each = [[(s, t, img, enc) for img, s in zip(imgs, sts, strict=True)] for t, imgs, sts, enc in streams]
    items = list(heapq.merge(*each, key=lambda item: item[0]))
    with open(path, "wb") as handle:
        writer = Writer(handle, chunk_size=chunk_size)
        schemas = {
            "sensor_msgs/msg/Image": writer.register_msgdef("sensor_msgs/msg/Image", IMAGE_DEF),
            "sensor_msgs/msg/CompressedImage": writer.register_msgdef("sensor_msgs/msg/CompressedImage", COMPRESSED_DEF),
        }
        log_time, index = 0, -1
        for stamp, t, image, enc in items:
            log_time = max(log_time + 1, stamp)  # logged on arrival: in order, even where a header stamp goes back
            index += t == topic
            if t == topic and index in garbage_at:
                channel = writer._channel_ids[t]  # registered by the topic's first message
                writer._writer.add_message(channel_id=channel, log_time=log_time, publish_time=log_time, sequence=0, data=b"\x00\x01junk")
                continue
            fields, msgtype = payload(image, enc)
            header = {"stamp": {"sec": stamp // 1_000_000_000, "nanosec": stamp % 1_000_000_000}, "frame_id": frame_id}
            writer.write_message(t, schemas[msgtype], {"header": header, **fields}, log_time=log_time, publish_time=log_time)
        writer.finish()
    return path


def write_rosbag2(
    folder: Path, images, stamp_list, topic: str = "/camera/image_raw", encoding: str = "bgr8", frame_id: str = "camera_front", garbage_at=()
) -> Path:
    """A rosbag2 folder (SQLite3 storage) of `images` on `topic`, stamped `stamp_list`; the messages numbered in
    `garbage_at` are bytes that do not decode."""
    from rosbags.rosbag2 import StoragePlugin, Writer
    from rosbags.typesys import Stores, get_typestore

    store = get_typestore(Stores.ROS2_HUMBLE)
    Time, Header = store.types["builtin_interfaces/msg/Time"], store.types["std_msgs/msg/Header"]
    with Writer(folder, version=8, storage_plugin=StoragePlugin.SQLITE3) as writer:
        _, msgtype = payload(images[0], encoding)
        connection = writer.add_connection(topic, msgtype, typestore=store)
        cls = store.types[msgtype]
        log_time = 0
        for index, (image, stamp) in enumerate(zip(images, stamp_list, strict=True)):
            log_time = max(log_time + 1, stamp)
            if index in garbage_at:
                writer.write(connection, log_time, b"\x00\x01junk")
                continue
            fields, _ = payload(image, encoding)
            header = Header(stamp=Time(sec=stamp // 1_000_000_000, nanosec=stamp % 1_000_000_000), frame_id=frame_id)
            fields["data"] = np.frombuffer(fields["data"], np.uint8)
            message = cls(header=header, **fields)
            writer.write(connection, log_time, store.serialize_cdr(message, msgtype))
    return folder
