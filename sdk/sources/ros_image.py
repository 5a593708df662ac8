"""Camera messages of a recording into the frames the pipeline reads: BGR (or gray) uint8 arrays.

sensor_msgs/msg/Image (and foxglove.RawImage) in rgb8, bgr8 or mono8; sensor_msgs/msg/CompressedImage (and
foxglove.CompressedImage) holding a JPEG or a PNG. Anything else is refused by name: the message type, the
encoding and what is read."""

from __future__ import annotations

import numpy as np

from sdk.sources.base import CorruptFrame
from sdk.sources.images import truncated

RAW_TYPES = ("sensor_msgs/msg/Image", "sensor_msgs/Image", "foxglove.RawImage")
COMPRESSED_TYPES = ("sensor_msgs/msg/CompressedImage", "sensor_msgs/CompressedImage", "foxglove.CompressedImage")
IMAGE_TYPES = RAW_TYPES + COMPRESSED_TYPES
CHANNELS = {"bgr8": 3, "rgb8": 3, "mono8": 1}  # the raw encodings read (sensor_msgs/image_encodings.hpp names)
COMPRESSED_FORMATS = ("jpeg", "png")


def unsupported(msgtype: str, message) -> str | None:
    """Why a camera message of this type cannot be read (its encoding or format), or None."""
    if msgtype in RAW_TYPES:
        encoding = str(message.encoding)
        if encoding not in CHANNELS:
            return f"{msgtype} encoding {encoding!r}; allowed: {', '.join(CHANNELS)}"
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
        channels = CHANNELS[str(message.encoding)]
        data = np.frombuffer(_buffer(message.data), np.uint8)
        if height <= 0 or width <= 0 or step < width * channels or data.size < step * height:
            need = f"{width}x{height} {message.encoding} with step {step} needs {step * height} bytes"
            raise CorruptFrame(f"{where}: {need}, the message has {data.size}")
        rows = data[: step * height].reshape(height, step)[:, : width * channels]
        pixels = rows.reshape(height, width) if channels == 1 else rows.reshape(height, width, channels)
        if self._buffer is None or self._buffer.shape != pixels.shape:
            self._buffer = np.empty(pixels.shape, np.uint8)
        if str(message.encoding) == "rgb8":
            cv2.cvtColor(pixels, cv2.COLOR_RGB2BGR, dst=self._buffer)
        else:
            np.copyto(self._buffer, pixels)
        return self._buffer


def _buffer(data):
    """The bytes of a message's `data` (bytes, a NumPy array, or a list of ints from some decoders)."""
    if isinstance(data, (bytes, bytearray, memoryview, np.ndarray)):
        return data
    return bytes(data)
