"""The live view: a Foxglove WebSocket server (the `foxglove-sdk` package's, protocol `foxglove.websocket.v1`) that
serves each frame's detections as `foxglove.ImageAnnotations` and the camera, downscaled and rate-limited, as a
JPEG `foxglove.CompressedImage`, to Foxglove or any client of the protocol; and, as JSON, each frame's latency by
stage against its deadline (`/latency`, `timed()`, called by the frame loop once the frame's marks are complete) and
the run's state once a second (`/status`: NOMINAL or DEGRADED in a service, the misses, the sources' counters).

The frame loop never waits on a client: the server queues each client's messages on threads of its own and drops the
oldest for a client that does not keep up (its backlog, `BACKLOG` messages). The sink logs one message at a time
(`_log`): foxglove-sdk reports a full backlog through Python's `logging`, which needs the interpreter's lock, while it
holds that client's own lock, so two threads logging at once could each hold the lock the other waits for, and the
whole process would stop. The annotations are built in the loop (microseconds); an image is copied, downscaled, into a
one-frame mailbox that a thread of this sink encodes and logs, at most `image_fps` a second: a frame that finds the
mailbox full replaces the one waiting. The server binds `host` (127.0.0.1 unless the pipeline says otherwise); a port
already in use stops the run before its first frame, naming it.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable

import numpy as np

from sdk.errors import SdkError
from sdk.frame import Frame
from sdk.optional import need
from sdk.postprocess.detections import Detections
from sdk.sinks.latency_record import SCHEMA_NAME, MissCounter, record, schema_bytes
from sdk.sinks.mcap_sink import JPEG_QUALITY, annotations

BACKLOG = 64  # messages waiting for one client before its oldest are dropped
STATUS_INTERVAL_S = 1.0
STATUS_SCHEMA = {
    "type": "object",
    "title": "sdk.RunState",
    "properties": {
        "state": {"type": "string", "description": "NOMINAL, DEGRADED (a service), RUNNING (a measuring run), STOPPING"},
        "frames": {"type": "integer"},
        "deadline_misses": {"type": "object", "description": "frames past their deadline, by camera"},
        "conditions": {"type": "array", "items": {"type": "string"}},
    },
}


class LiveView:
    name = "foxglove"

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 8765,
        image_fps: float = 5.0,
        image_width: int = 640,
        cameras: list[str] | None = None,
        title: str = "perception",
    ) -> None:
        self.host, self.requested_port = host, port
        self.image_fps, self.image_width = image_fps, image_width
        self.cameras = cameras or []
        self.title = title
        self.port: int | None = None  # the port it listens on (a requested 0: the one the system gave)
        self._server = None
        self._context = None
        self._channels: dict[str | None, object] = {}
        self._image_channels: dict[str | None, object] = {}
        self._epoch_offset = 0
        self._classes: dict[str, int] = {}
        self._mailbox: tuple[str | None, np.ndarray, int, str] | None = None
        self._wake = threading.Condition()
        self._log_lock = threading.Lock()  # one foxglove log at a time (the module docstring says why)
        self._stopping = False
        self._encoder: threading.Thread | None = None
        self._next_image_at: dict[str | None, float] = {}
        self.images_sent = 0
        self.images_skipped = 0  # frames whose image was not sent (the rate limit, or a newer one replaced it)
        self.errors = 0  # turns of the view's thread that failed (counted, the thread goes on; the frame loop never waits)
        self.last_error: str | None = None
        self._latency: dict[str | None, object] = {}
        self._status_channel = None
        self._status: Callable[[], dict] = dict  # the run's state (the runner's live_state; watch())
        self.counter = MissCounter()  # each camera's deadline (watch()) and misses
        self.status_interval_s = STATUS_INTERVAL_S

    def watch(self, status: Callable[[], dict], deadlines: dict[str | None, float]) -> None:
        """What the run tells the view: its state (called on the sink's thread once a second, while a client
        subscribes to /status) and each camera's deadline in ms (None: one camera)."""
        self._status, self.counter.deadlines = status, deadlines

    def open(self) -> None:
        foxglove = need("foxglove", "foxglove-sdk", "the foxglove sink (live view)")
        from foxglove.channels import CompressedImageChannel, ImageAnnotationsChannel

        from sdk.sinks.mcap_sink import message_classes

        self._messages = message_classes(foxglove)
        self._context = foxglove.Context()
        try:
            self._server = foxglove.start_server(
                name=self.title, host=self.host, port=self.requested_port, context=self._context, message_backlog_size=BACKLOG
            )
        except Exception as exc:  # noqa: BLE001 - foxglove's FoxgloveError (a RuntimeError): the port taken, the address not ours
            raise SdkError(
                f"foxglove sink: cannot serve on {self.host}:{self.requested_port}: {exc}",
                hint="another process holds the port (another run's live view?): give the sink another `port`, or 0 for any free one",
            ) from None
        self.port = self._server.port
        latency = foxglove.Schema(name=SCHEMA_NAME, encoding="jsonschema", data=schema_bytes())
        for camera in self.cameras or [None]:
            suffix = f"/{camera}" if camera is not None else ""
            self._channels[camera] = ImageAnnotationsChannel(f"/detections{suffix}", context=self._context)
            self._latency[camera] = foxglove.Channel(f"/latency{suffix}", schema=latency, message_encoding="json", context=self._context)
            if self.image_fps:
                self._image_channels[camera] = CompressedImageChannel(f"/camera/image/compressed{suffix}", context=self._context)
        state = foxglove.Schema(name="sdk.RunState", encoding="jsonschema", data=json.dumps(STATUS_SCHEMA).encode())
        self._status_channel = foxglove.Channel("/status", schema=state, message_encoding="json", context=self._context)
        self._epoch_offset = time.time_ns() - time.monotonic_ns()
        self._encoder = threading.Thread(target=self._encode_loop, name="live-view", daemon=True)
        self._encoder.start()

    def write(self, frame: Frame, detections: Detections) -> None:
        if self._server is None:
            return
        camera = frame.camera if self.cameras else None
        stamp = frame.stamp_ns if frame.stamp_ns is not None else frame.t_capture_ns + self._epoch_offset
        channel = self._channels[camera]
        if channel.has_sinks():  # a client is subscribed: build the message only then
            self._log(channel, annotations(self._messages, frame, detections, stamp, self._classes), stamp)
        if self.image_fps and self._image_channels[camera].has_sinks():
            self._offer_image(camera, frame, stamp)

    def timed(self, frame: Frame, marks: list[int]) -> None:
        """A frame's marks once they are complete (capture, pickup, each stage's end: sdk/runtime/recorder.py): its
        latency by stage and against its camera's deadline, counted always, sent while a client subscribes."""
        if self._server is None:
            return
        camera = frame.camera if self.cameras else None
        end_to_end, deadline, missed, misses = self.counter.count(camera, marks)
        channel = self._latency[camera]
        if channel.has_sinks():
            stamp = frame.stamp_ns if frame.stamp_ns is not None else frame.t_capture_ns + self._epoch_offset
            self._log(channel, record(frame, marks, end_to_end, deadline, missed, misses), stamp)

    def _log(self, channel, message, log_time: int) -> None:
        """One message to one channel, never while another thread of the sink logs (foxglove-sdk would deadlock:
        the module docstring)."""
        with self._log_lock:
            channel.log(message, log_time=log_time)

    def _publish_status(self) -> None:
        try:
            state = dict(self._status())
        except Exception as exc:  # noqa: BLE001 - the view reports; it never takes the run down
            state = {"state": "UNKNOWN", "error": f"{type(exc).__name__}: {exc}"}
        misses = dict(self.counter.misses)  # a snapshot: the frame loop adds cameras while this thread reads
        state["deadline_misses"] = {camera or "camera": n for camera, n in misses.items()}
        state["live_view"] = {"images_sent": self.images_sent, "images_skipped": self.images_skipped, "errors": self.errors}
        if self.last_error is not None:
            state["live_view"]["last_error"] = self.last_error
        self._log(self._status_channel, state, time.time_ns())

    def _offer_image(self, camera: str | None, frame: Frame, stamp: int) -> None:
        import cv2

        now = time.monotonic()
        if now < self._next_image_at.get(camera, 0.0):
            self.images_skipped += 1
            return
        self._next_image_at[camera] = now + 1.0 / self.image_fps
        image = frame.image.to_bgr() if hasattr(frame.image, "to_bgr") else frame.image
        height, width = image.shape[:2]
        scale = min(1.0, self.image_width / width)
        small = cv2.resize(image, (max(1, round(width * scale)), max(1, round(height * scale))), interpolation=cv2.INTER_AREA)
        with self._wake:
            if self._mailbox is not None:
                self.images_skipped += 1  # the encoder is behind: the newer frame wins
            self._mailbox = (camera, small, stamp, frame.frame_id or frame.camera or "camera")
            self._wake.notify()

    def _encode_loop(self) -> None:
        next_status = time.monotonic()
        while True:
            with self._wake:
                self._wake.wait_for(lambda: self._mailbox is not None or self._stopping, timeout=max(0.0, next_status - time.monotonic()))
                if self._stopping:
                    return
                item, self._mailbox = self._mailbox, None
            try:
                if time.monotonic() >= next_status:
                    next_status = time.monotonic() + self.status_interval_s
                    if self._status_channel.has_sinks():
                        self._publish_status()
                if item is not None:
                    self._send_image(*item)
            except Exception as exc:  # noqa: BLE001 - one lost status or image is counted; the view goes on
                self.errors += 1
                self.last_error = f"{type(exc).__name__}: {exc}"
                if item is not None:
                    self.images_skipped += 1

    def _send_image(self, camera: str | None, image: np.ndarray, stamp: int, frame_id: str) -> None:
        import cv2

        m = self._messages
        ok, data = cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, JPEG_QUALITY])
        if not ok:
            return
        timestamp = m.Timestamp(sec=stamp // 1_000_000_000, nsec=stamp % 1_000_000_000)
        message = m.CompressedImage(timestamp=timestamp, frame_id=frame_id, data=data.tobytes(), format="jpeg")
        self._log(self._image_channels[camera], message, stamp)
        self.images_sent += 1

    def close(self) -> None:
        with self._wake:
            self._stopping = True
            self._wake.notify_all()
        if self._encoder is not None:
            self._encoder.join(timeout=5)
            self._encoder = None
        if self._server is not None:
            server, self._server = self._server, None
            for channel in (*self._channels.values(), *self._image_channels.values(), *self._latency.values(), self._status_channel):
                channel.close()
            server.stop()
