"""Camera and replay sources behind one URI factory."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from sdk.lazy import lazy_attributes
from sdk.sources.uri import SourceUri, parse_source_uri

if TYPE_CHECKING:
    from sdk.sources.base import CorruptFrame, FrameReader
    from sdk.sources.stream import FrameStream, StreamCounters
    from sdk.spec.schema import Reconnect, Replay

# Loaded on first use (PEP 562), so that parsing a source URI, which the service's resident supervisor does, loads
# neither NumPy nor the stream.
_LAZY = {
    "CorruptFrame": "sdk.sources.base",
    "FrameReader": "sdk.sources.base",
    "FrameStream": "sdk.sources.stream",
    "StreamCounters": "sdk.sources.stream",
}


__getattr__ = lazy_attributes(__name__, _LAZY)


def open_reader(uri: str, base: Path | None = None) -> FrameReader:
    """The reader for a source URI (not yet opened)."""
    parsed = parse_source_uri(uri, base)
    if parsed.scheme == "images":
        from sdk.sources.images import ImageFolder

        return ImageFolder(parsed)
    if parsed.scheme == "mcap":
        from sdk.sources.mcap_file import McapTopic

        return McapTopic(parsed)
    if parsed.scheme == "rosbag2":
        from sdk.sources.rosbag2_folder import Rosbag2Topic

        return Rosbag2Topic(parsed)
    if parsed.scheme == "synthetic":
        from sdk.sources.synthetic import SyntheticReader

        return SyntheticReader(parsed)
    from sdk.sources.opencv_capture import OpenCvCapture

    return OpenCvCapture(parsed)


def open_stream(uri: str, replay: Replay, base: Path | None = None, max_frames: int | None = None, reconnect: Reconnect | None = None) -> FrameStream:
    from sdk.sources.stream import FrameStream

    stream = FrameStream(open_reader(uri, base), replay, max_frames=max_frames, reconnect=reconnect)
    stream.name = uri.partition("?")[0]  # what the status calls the camera
    return stream


__all__ = [
    "CorruptFrame",
    "FrameReader",
    "FrameStream",
    "SourceUri",
    "StreamCounters",
    "open_reader",
    "open_stream",
    "parse_source_uri",
]
