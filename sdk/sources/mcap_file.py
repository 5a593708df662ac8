"""mcap://PATH?topic=TOPIC: a camera topic of an MCAP file, read with the `mcap` library (ROS 2 messages decoded by
`mcap-ros2-support`, Foxglove's protobuf images by `mcap-protobuf-support` where installed).

An intact file (its summary readable) is read in log-time order through its index; a file without a readable
summary (truncated, or still being recorded) is read from the start in file order, and where its records end
in damage, the frames before it are delivered and the damage is reported (sdk/sources/recording.py).
"""

from __future__ import annotations

from collections.abc import Iterator

from sdk.errors import SourceError
from sdk.optional import need
from sdk.sources.recording import Damaged, Message, RecordedTopic
from sdk.sources.ros_image import IMAGE_TYPES


def _stamp(msgtype: str, message) -> tuple[int, str]:
    """(stamp in ns, frame id) of a camera message: the ROS header's, or a Foxglove message's own."""
    if msgtype.startswith("foxglove."):
        stamp = message.timestamp
        return int(stamp.seconds) * 1_000_000_000 + int(stamp.nanos), str(message.frame_id)
    header = message.header
    return int(header.stamp.sec) * 1_000_000_000 + int(header.stamp.nanosec), str(header.frame_id)


class McapTopic(RecordedTopic):
    scheme = "mcap"

    def __init__(self, uri) -> None:
        super().__init__(uri)
        self._file = None
        self._mcap = need("mcap.reader", "mcap", "source mcap://")
        self._ros2 = need("mcap_ros2.decoder", "mcap-ros2-support", "source mcap://")

    def _factories(self) -> list:
        factories = [self._ros2.DecoderFactory()]
        try:
            from mcap_protobuf.decoder import DecoderFactory as ProtobufFactory  # Foxglove's images, where installed
        except ImportError:
            return factories
        return [*factories, ProtobufFactory()]

    def _handle(self):
        if not self.path.is_file():
            raise SourceError(f"mcap://: {self.path} is not a file", hint="the path is relative to the pipeline file's folder")
        try:
            return open(self.path, "rb")
        except OSError as exc:
            raise SourceError(f"mcap://: cannot open {self.path}: {exc.strerror}") from None

    def _summary(self, handle):
        """The file's summary (channels, schemas, counts), or None where it cannot be read (a damaged end)."""
        handle.seek(0)
        try:
            return self._mcap.SeekingReader(handle).get_summary()
        except Exception:  # noqa: BLE001 - any failure to read the end means: read from the start
            return None
        finally:
            handle.seek(0)

    def image_topics(self) -> dict[str, str]:
        with self._handle() as handle:
            summary = self._summary(handle)
            if summary is not None:
                return {c.topic: summary.schemas[c.schema_id].name for c in summary.channels.values() if _is_image(summary.schemas.get(c.schema_id))}
            return self._scan_topics(handle)

    def _scan_topics(self, handle) -> dict[str, str]:
        """The image topics of a file without a summary: its channel records, read from the start until the damage."""
        from mcap.records import Channel, Schema
        from mcap.stream_reader import StreamReader

        schemas, topics = {}, {}
        try:
            for record in StreamReader(handle, skip_magic=False).records:
                if isinstance(record, Schema):
                    schemas[record.id] = record
                elif isinstance(record, Channel) and _is_image(schemas.get(record.schema_id)):
                    topics[record.topic] = schemas[record.schema_id].name
        except Exception:  # noqa: BLE001 - the damage ends the scan; what came before it counts
            pass
        return topics

    def _open_messages(self) -> Iterator[Message]:
        handle = self._handle()
        summary = self._summary(handle)
        if summary is not None:
            topics = {c.topic: summary.schemas[c.schema_id].name for c in summary.channels.values() if _is_image(summary.schemas.get(c.schema_id))}
        else:
            topics = self._scan_topics(handle)
            handle.seek(0)
        if self.topic not in topics:
            handle.close()
            raise self._missing_topic(topics)
        self._file = handle
        self._nominal = _rate(summary, self.topic) if summary is not None else None
        self.frame_count = _count(summary, self.topic) if summary is not None else None
        if summary is not None:
            reader = self._mcap.SeekingReader(handle, validate_crcs=True, decoder_factories=self._factories())
            return self._messages_of(reader, log_time_order=True)
        reader = self._mcap.NonSeekingReader(handle, validate_crcs=True, decoder_factories=self._factories())
        return self._messages_of(reader, log_time_order=False)

    def _messages_of(self, reader, log_time_order: bool) -> Iterator[Message]:
        """The topic's messages, each decoded here (not by the reader's iterator): a message that does not decode is one
        corrupt frame and the next is read; a record that cannot be read ends the stream as damage."""
        from mcap.exceptions import EndOfFile

        messages = reader.iter_messages(topics=[self.topic], log_time_order=log_time_order)
        decoders: dict[int, object] = {}
        while True:
            try:
                schema, channel, record = next(messages)
            except StopIteration:
                return
            except EndOfFile:
                raise Damaged("the file ends part-way through a record (truncated)") from None
            except Exception as exc:  # noqa: BLE001 - a corrupt file: what came before it was delivered
                raise Damaged(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__) from None
            if channel.id not in decoders:
                decoders[channel.id] = self._decoder_for(channel, schema)
            try:
                decoded = decoders[channel.id](record.data)
                stamp, frame_id = _stamp(schema.name, decoded)
            except Exception as exc:  # noqa: BLE001 - this message's bytes: one corrupt frame
                problem = f"a {schema.name} message of {len(record.data)} bytes does not decode ({type(exc).__name__}: {exc})"
                yield Message(None, "", schema.name, None, problem=problem)
                continue
            yield Message(stamp, frame_id, schema.name, decoded)

    def _decoder_for(self, channel, schema):
        for factory in self._factories():
            decoder = factory.decoder_for(channel.message_encoding, schema)
            if decoder is not None:
                return decoder
        raise SourceError(
            f"{self.name}: cannot decode the topic's {channel.message_encoding} messages of {schema.name} ({schema.encoding} schema)",
            hint="ROS 2 (cdr) messages need mcap-ros2-support; Foxglove protobuf images need mcap-protobuf-support",
        )

    def _close_messages(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    @property
    def nominal_fps(self) -> float | None:
        return getattr(self, "_nominal", None)


def _is_image(schema) -> bool:
    return schema is not None and schema.name in IMAGE_TYPES


def _count(summary, topic: str) -> int | None:
    if summary.statistics is None:
        return None
    return sum(n for cid, n in summary.statistics.channel_message_counts.items() if summary.channels[cid].topic == topic)


def _rate(summary, topic: str) -> float | None:
    """Frames per second of a topic from the summary's statistics (its message count over the file's span)."""
    stats = summary.statistics
    if stats is None:
        return None
    counts = [n for cid, n in stats.channel_message_counts.items() if summary.channels[cid].topic == topic]
    span = (stats.message_end_time - stats.message_start_time) / 1e9
    if not counts or counts[0] < 2 or span <= 0:
        return None
    fps = (counts[0] - 1) / span
    return fps if 0.1 <= fps <= 1000 else None
