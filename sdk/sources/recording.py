"""One camera topic of a recording (mcap://, rosbag2://): frames with their recorded header stamps.

The container formats (sdk/sources/mcap_file.py, sdk/sources/rosbag2_folder.py) hand over messages as
`Message` (the header stamp, the frame id, the message type and the decoded message); this reader turns them
into frames (sdk/sources/ros_image.py), keeps the newest frame's stamp and frame id for the stream, looks one
message ahead (the recorded pace and `late_frames: drop` need the next frame's stamp), counts stamps that go
backwards and holes in the stamps (sdk/sources/frame_gaps.py, as for a video's timestamps), and turns a
recording damaged part-way into one reported corrupt frame after every frame before the damage.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sdk.errors import SourceError
from sdk.sources.base import CorruptFrame, FrameReader
from sdk.sources.frame_gaps import FrameGaps
from sdk.sources.ros_image import IMAGE_TYPES, ImageDecoder, unsupported
from sdk.sources.uri import SourceUri


@dataclass
class Message:
    stamp_ns: int | None  # the header stamp (sensor_msgs) or timestamp (foxglove), nanoseconds; None: not decoded
    frame_id: str
    msgtype: str
    message: object
    problem: str | None = None  # why the message could not be decoded: one corrupt frame, the stream goes on
    pending: Future | None = None  # a compressed image's decode, started ahead (sdk/sources/decode_ahead.py)


class Damaged(Exception):
    """The container cannot be read past this point (a truncated or corrupt file)."""


class RecordedTopic(FrameReader):
    """A camera topic of a recording, replayed in the recording's order."""

    scheme = "recording"

    def __init__(self, uri: SourceUri) -> None:
        self.uri = uri
        self.path = Path(uri.target)
        topics = uri.params.get("topic")
        if not topics:
            raise SourceError(
                f"source {uri.scheme}://{uri.target}: no topic= given",
                hint=f"name the camera topic: {uri.scheme}://{uri.target}?topic=/camera/image_raw (`sdk check` lists the image topics)",
            )
        self.topic = topics
        self.name = f"{uri.scheme}://{uri.target}?topic={topics}"
        self.stamp_ns: int | None = None  # the newest frame's recorded stamp
        self.frame_id: str | None = None
        self.out_of_order = 0  # frames whose stamp is before the previous frame's, every pass
        self.out_of_order_last: str | None = None
        self._gaps = FrameGaps()
        self._messages: Iterator[Message] | None = None
        self._ahead: Message | None = None
        self._ended = False
        self._delivered = 0
        self._previous: int | None = None
        self._origin: int | None = None  # the pass' first stamp: holes are told in seconds from it
        self._damage: str | None = None
        self._decoder = ImageDecoder()
        self.frame_count: int | None = None  # the topic's messages as the recording's index counts them (None: not known)

    @abstractmethod
    def image_topics(self) -> dict[str, str]:
        """Every image topic of the recording and its message type (the readable ones)."""

    @abstractmethod
    def _open_messages(self) -> Iterator[Message]:
        """The topic's messages in the recording's order; raises Damaged where the file cannot be read further."""

    def _close_messages(self) -> None:
        """Let go of the file (the subclass' handles)."""

    def _missing_topic(self, topics: dict[str, str]) -> SourceError:
        listed = ", ".join(f"{t} ({k})" for t, k in sorted(topics.items())) or "none"
        return SourceError(
            f"{self.uri.scheme}://{self.uri.target}: topic {self.topic!r} is not in the recording; its image topics: {listed}",
            hint=f"set topic= to one of its image topics ({', '.join(IMAGE_TYPES[:2])} and foxglove images are read)",
        )

    def open(self) -> None:
        from sdk.sources.decode_ahead import DecodeAhead

        self.close()
        self._messages = DecodeAhead(self._open_messages(), Damaged)
        self._ahead, self._ended, self._delivered, self._previous, self._origin, self._damage = None, False, 0, None, None, None
        self._gaps.start_pass(None, None)
        try:
            first = self._peek()
            problem = unsupported(first.msgtype, first.message) if first is not None and first.problem is None else None
        except BaseException:
            self.close()  # no file left open behind an error (a topic no decoder reads)
            raise
        if problem is not None:
            self.close()
            raise SourceError(
                f"{self.name}: {problem}",
                hint="convert the topic to a read encoding (e.g. image_transport republish to compressed JPEG), or pick another topic",
            )

    def first_stamp_ns(self) -> int | None:
        """The first frame's stamp, read before the stream opens (None where it cannot be read: open() will say why).
        Cameras of one recording replayed at the recorded pace count their due times from the earliest of theirs."""
        try:
            messages = self._open_messages()
            first = next(messages, None)
        except Exception:  # noqa: BLE001 - a missing topic, a damaged file: the stream's own open reports it
            return None
        finally:
            self._close_messages()
        return first.stamp_ns if first is not None else None  # None also for a first message that does not decode

    def _peek(self) -> Message | None:
        """The next message without taking it (None at the end or at the damage)."""
        if self._ahead is None and not self._ended and self._messages is not None:
            try:
                self._ahead = next(self._messages)
            except StopIteration:
                self._ended = True
            except Damaged as exc:
                self._ended = True
                self._damage = str(exc)
        return self._ahead

    @property
    def next_stamp_ns(self) -> int | None:
        """The stamp of the frame after the newest (None at the end)."""
        ahead = self._peek()
        return ahead.stamp_ns if ahead is not None else None

    def _take(self) -> Message | None:
        message = self._peek()
        self._ahead = None
        if message is None:
            damage, self._damage = self._damage, None
            if damage is not None:  # after every frame before it: the damage, once, as a corrupt frame
                raise CorruptFrame(f"{self.name}: the recording is damaged after {self._delivered} frame(s): {damage}")
            self._gaps.end()
            return None
        self._delivered += 1
        if message.problem is not None:
            self._gaps.frame(None)  # it arrived, corrupt: no hole
            raise CorruptFrame(f"{self.name}: frame {self._delivered - 1}: {message.problem}")
        stamp = message.stamp_ns
        if self._previous is not None and stamp < self._previous:
            self.out_of_order += 1
            self.out_of_order_last = (
                f"frame {self._delivered - 1} of {self.topic} is stamped {(self._previous - stamp) / 1e6:.3f} ms before the frame before it"
            )
        else:
            self._origin = stamp if self._origin is None else self._origin
            self._gaps.frame((stamp - self._origin) / 1e6)
            self._previous = stamp
        self.stamp_ns, self.frame_id = stamp, message.frame_id
        return message

    def read(self) -> np.ndarray | None:
        if self._messages is None:
            raise SourceError("read() before open()")
        message = self._take()
        if message is None:
            return None
        problem = unsupported(message.msgtype, message.message)
        if problem is not None:
            raise CorruptFrame(f"{self.name}: frame {self._delivered - 1}: {problem}")
        return self._decoder.decode(message.msgtype, message.message, f"{self.name}: frame {self._delivered - 1}", message.pending)

    def skip(self) -> bool:
        try:
            return self._take() is not None
        except CorruptFrame:
            return True

    def rewind(self) -> None:
        self.open()

    def close(self) -> None:
        if self._messages is not None and hasattr(self._messages, "close"):
            self._messages.close()  # the decodes ahead, cancelled or finished, before the file goes
        self._close_messages()
        self._messages, self._ahead = None, None

    @property
    def lost_frames(self) -> int:
        return self._gaps.lost

    @property
    def lost_last(self) -> str | None:
        return self._gaps.last
