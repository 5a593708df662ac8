"""rosbag2://FOLDER?topic=TOPIC: a camera topic of a ROS 2 bag (its folder: metadata.yaml and SQLite3 or MCAP
storage), read with `rosbags` (no ROS installation needed; the messages are decoded with its ROS 2 Humble type store,
or with the definitions the bag carries for types it does not know)."""

from __future__ import annotations

from collections.abc import Iterator

from sdk.errors import SourceError
from sdk.optional import need
from sdk.sources.recording import Damaged, Message, RecordedTopic
from sdk.sources.ros_image import IMAGE_TYPES


class Rosbag2Topic(RecordedTopic):
    scheme = "rosbag2"

    def __init__(self, uri) -> None:
        super().__init__(uri)
        self._rosbag2 = need("rosbags.rosbag2", "rosbags", "source rosbag2://")
        self._typesys = need("rosbags.typesys", "rosbags", "source rosbag2://")
        self._reader = None
        self._nominal: float | None = None

    def _open_reader(self):
        if not self.path.is_dir():
            raise SourceError(
                f"rosbag2://: {self.path} is not a folder",
                hint="a rosbag2 recording is the folder `ros2 bag record` made (metadata.yaml beside its storage files); a single .mcap file is mcap://",
            )
        reader = self._rosbag2.Reader(self.path)
        try:
            reader.open()
        except Exception as exc:  # noqa: BLE001 - rosbags' ReaderError and the storage's own errors
            raise SourceError(f"rosbag2://: cannot open the bag {self.path}: {exc}") from None
        return reader

    def image_topics(self) -> dict[str, str]:
        reader = self._open_reader()
        try:
            return _image_topics(reader)
        finally:
            reader.close()

    def _open_messages(self) -> Iterator[Message]:
        reader = self._open_reader()
        topics = _image_topics(reader)
        if self.topic not in topics:
            reader.close()
            raise self._missing_topic(topics)
        self._reader = reader
        connections = [c for c in reader.connections if c.topic == self.topic]
        count = self.frame_count = sum(c.msgcount for c in connections)
        span = reader.duration / 1e9 if reader.duration else 0
        self._nominal = (count - 1) / span if count > 1 and span > 0 and 0.1 <= (count - 1) / span <= 1000 else None
        return self._messages_of(reader, connections)

    def _messages_of(self, reader, connections) -> Iterator[Message]:
        typestore = self._typesys.get_typestore(self._typesys.Stores.ROS2_HUMBLE)
        messages = reader.messages(connections=connections)
        while True:
            try:
                connection, _, raw = next(messages)
            except StopIteration:
                return
            except Exception as exc:  # noqa: BLE001 - a damaged storage file: what came before it was delivered
                raise Damaged(f"{type(exc).__name__}: {exc}") from None
            msgtype = _ros2_name(connection.msgtype)
            try:
                message = typestore.deserialize_cdr(raw, connection.msgtype)
            except Exception as exc:  # noqa: BLE001 - a message that does not decode is one corrupt frame; the next may
                problem = f"a {msgtype} message of {len(raw)} bytes does not decode ({type(exc).__name__}: {exc})"
                yield Message(None, "", msgtype, None, problem=problem)
                continue
            header = message.header
            yield Message(int(header.stamp.sec) * 1_000_000_000 + int(header.stamp.nanosec), str(header.frame_id), msgtype, message)

    def _close_messages(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    @property
    def nominal_fps(self) -> float | None:
        return self._nominal


def _ros2_name(msgtype: str) -> str:
    return msgtype if "/msg/" in msgtype else msgtype.replace("/", "/msg/", 1)


def _image_topics(reader) -> dict[str, str]:
    return {c.topic: _ros2_name(c.msgtype) for c in reader.connections if _ros2_name(c.msgtype) in IMAGE_TYPES}
