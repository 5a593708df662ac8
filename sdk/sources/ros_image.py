"""Camera messages of a recording into the frames the pipeline reads: BGR (or gray) uint8 arrays.

sensor_msgs/msg/Image (and foxglove.RawImage) in rgb8, bgr8, mono8, the packed 4:2:2 YUV of ROS (`yuv422`: UYVY
byte order; `yuv422_yuy2`: YUYV) and NV12 (a Y plane, then interleaved U/V at half size), the YUV ones converted to
BGR by OpenCV (BT.601, video range: OpenCV's YUV conversions, as a V4L2 camera's frames are); sensor_msgs/msg/
CompressedImage (and foxglove.CompressedImage) holding a JPEG or a PNG. Anything else is refused by name: the
message type, the encoding and what is read."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sdk.sources.base import CorruptFrame
from sdk.sources.images import truncated

RAW_TYPES = ("sensor_msgs/msg/Image", "sensor_msgs/Image", "foxglove.RawImage")
COMPRESSED_TYPES = ("sensor_msgs/msg/CompressedImage", "sensor_msgs/CompressedImage", "foxglove.CompressedImage")
IMAGE_TYPES = RAW_TYPES + COMPRESSED_TYPES


@dataclass(frozen=True)
class Layout:
    """How a raw encoding lies in a message's rows: bytes a pixel in a row (of the Y plane for NV12), rows of data a row
    of pixels (NV12: 1.5, its half-size U/V plane below the Y plane), the cv2 conversion to BGR (None: copied as it is)
    and the pixel shape it wants even (4:2:2: the width; 4:2:0: width and height)."""

    bytes_per_pixel: int
    conversion: str | None
    even: tuple[bool, bool] = (False, False)  # (width, height)
    plane_rows: float = 1.0


# The raw encodings read, by their sensor_msgs/image_encodings.hpp names (and Foxglove's aliases of the same bytes).
UYVY = Layout(2, "COLOR_YUV2BGR_UYVY", (True, False))
YUYV = Layout(2, "COLOR_YUV2BGR_YUY2", (True, False))
NV12 = Layout(1, "COLOR_YUV2BGR_NV12", (True, True), 1.5)
ENCODINGS = {
    "bgr8": Layout(3, None),
    "rgb8": Layout(3, "COLOR_RGB2BGR"),
    "mono8": Layout(1, None),
    "yuv422": UYVY,  # ROS's yuv422 is UYVY (u0 y0 v0 y1)
    "uyvy": UYVY,
    "yuv422_yuy2": YUYV,  # y0 u0 y1 v0
    "yuyv": YUYV,
    "nv12": NV12,
}
COMPRESSED_FORMATS = ("jpeg", "png")


def unsupported(msgtype: str, message) -> str | None:
    """Why a camera message of this type cannot be read (its encoding or format), or None."""
    if msgtype in RAW_TYPES:
        encoding = str(message.encoding)
        if encoding not in ENCODINGS:
            return f"{msgtype} encoding {encoding!r}; allowed: {', '.join(ENCODINGS)}"
    elif msgtype in COMPRESSED_TYPES:
        if _compressed_kind(str(message.format)) is None:
            allowed = " or ".join(COMPRESSED_FORMATS)
            return f"{msgtype} format {str(message.format)!r}; allowed: {allowed} (e.g. 'jpeg', 'bgr8; jpeg compressed bgr8', 'png')"
    else:
        return f"message type {msgtype}; allowed: {', '.join(IMAGE_TYPES)}"
    return None


def _compressed_kind(fmt: str) -> str | None:
    """'jpeg' or 'png' from a CompressedImage's format ('jpeg', 'png', 'rgb8; jpeg compressed bgr8'), or None."""
    words = fmt.lower().replace(";", " ").split()
    for kind, names in (("jpeg", ("jpeg", "jpg")), ("png", ("png",))):
        if any(word in names for word in words):
            return kind
    return None


class ImageDecoder:
    """Decodes one camera's messages into a buffer of its own (the steady state allocates for the decode only)."""

    def __init__(self) -> None:
        self._buffer: np.ndarray | None = None

    def decode(self, msgtype: str, message, where: str, pending=None) -> np.ndarray:
        import cv2

        if msgtype in COMPRESSED_TYPES:
            if pending is not None:  # decoded ahead (sdk/sources/decode_ahead.py)
                image, problem = pending.result()
                if problem is not None:
                    raise CorruptFrame(f"{where}: {problem}")
                return image
            data = bytes(message.data)
            problem = truncated(data)
            if problem is not None:
                raise CorruptFrame(f"{where}: {problem}")
            image = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
            if image is None:
                raise CorruptFrame(f"{where}: cannot decode the {_compressed_kind(str(message.format))} image ({len(data)} bytes)")
            return image
        height, width, step = int(message.height), int(message.width), int(message.step)
        encoding = str(message.encoding)
        layout = ENCODINGS[encoding]
        row = width * layout.bytes_per_pixel
        rows = int(height * layout.plane_rows)
        data = np.frombuffer(_buffer(message.data), np.uint8)
        if height <= 0 or width <= 0 or step < row or data.size < step * rows:
            need = f"{width}x{height} {encoding} with step {step} needs {step * rows} bytes"
            raise CorruptFrame(f"{where}: {need}, the message has {data.size}")
        odd = [what for what, size, even in (("width", width, layout.even[0]), ("height", height, layout.even[1])) if even and size % 2]
        if odd:
            raise CorruptFrame(f"{where}: {width}x{height} {encoding}: an odd {' and '.join(odd)}; allowed: even for {encoding}")
        packed = data[: step * rows].reshape(rows, step)[:, :row]
        if layout.bytes_per_pixel == 3:
            packed = packed.reshape(rows, width, 3)
        elif layout.bytes_per_pixel == 2:
            packed = packed.reshape(rows, width, 2)
        shape = (height, width) if encoding == "mono8" else (height, width, 3)
        if self._buffer is None or self._buffer.shape != shape:
            self._buffer = np.empty(shape, np.uint8)
        if layout.conversion is None:
            np.copyto(self._buffer, packed)
        else:
            cv2.cvtColor(np.ascontiguousarray(packed), getattr(cv2, layout.conversion), dst=self._buffer)
        return self._buffer


def _buffer(data):
    """The bytes of a message's `data` (bytes, a NumPy array, or a list of ints from some decoders)."""
    if isinstance(data, (bytes, bytearray, memoryview, np.ndarray)):
        return data
    return bytes(data)
