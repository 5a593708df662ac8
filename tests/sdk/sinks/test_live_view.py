"""The live view: a real WebSocket client (the `websockets` package) negotiates the Foxglove protocol with the running
pipeline's server, subscribes, and decodes the detections and the camera images it is sent; garbage from a client
and a port already taken are handled."""

from __future__ import annotations

import base64
import json
import socket
import struct
import threading
import time

import cv2
import numpy as np
import pytest

from sdk.errors import SdkError
from sdk.runtime import PipelineRunner

SUBPROTOCOLS = ["foxglove.sdk.v1", "foxglove.websocket.v1"]


def message_class(schema_b64: str, name: str):
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    files = descriptor_pb2.FileDescriptorSet.FromString(base64.b64decode(schema_b64))
    pool = descriptor_pool.DescriptorPool()
    for file in files.file:
        pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(name))


class Client:
    """A Foxglove WebSocket client: the channels advertised, subscriptions, and the decoded messages by topic."""

    def __init__(self, ws, topics=("/detections", "/camera/image/compressed")) -> None:
        self.ws = ws
        self.channels: dict[str, dict] = {}
        self.decoders: dict[int, tuple[str, object]] = {}
        deadline = time.monotonic() + 10
        while not set(topics) <= set(self.channels) and time.monotonic() < deadline:
            message = json.loads(self.ws.recv(timeout=10))
            if message["op"] == "advertise":
                self.channels.update({c["topic"]: c for c in message["channels"]})

    def subscribe(self, *topics: str) -> None:
        subscriptions = []
        for sub_id, topic in enumerate(topics, start=1):
            channel = self.channels[topic]
            self.decoders[sub_id] = (topic, message_class(channel["schema"], channel["schemaName"]))
            subscriptions.append({"id": sub_id, "channelId": channel["id"]})
        self.ws.send(json.dumps({"op": "subscribe", "subscriptions": subscriptions}))

    def receive(self, wanted: dict[str, int], timeout_s: float = 20) -> dict[str, list]:
        got: dict[str, list] = {topic: [] for topic in wanted}
        deadline = time.monotonic() + timeout_s
        while any(len(got[t]) < n for t, n in wanted.items()) and time.monotonic() < deadline:
            data = self.ws.recv(timeout=max(0.1, deadline - time.monotonic()))
            if isinstance(data, str) or data[0] != 0x01:  # JSON (status, advertise) or another binary op
                continue
            sub_id, log_time = struct.unpack_from("<IQ", data, 1)
            topic, cls = self.decoders[sub_id]
            got[topic].append((log_time, cls.FromString(data[13:])))
        return got



def connected(port: int):
    from websockets.sync.client import connect

    return connect(f"ws://127.0.0.1:{port}", subprotocols=SUBPROTOCOLS, open_timeout=10, close_timeout=1)


@pytest.fixture()
def running(tiny_pipeline, tmp_path):
    """The tiny pipeline running (a synthetic 64 x 48 source at 50 fps) with the live view on a free port."""
    pipeline, artifacts = tiny_pipeline(frames=1500, rate="50")
    text = (pipeline.path.read_text()).replace("  - {kind: jsonl}", "  - {kind: jsonl}\n  - {kind: foxglove, port: 0, image_fps: 20}")
    pipeline.path.write_text(text)
    from sdk.spec import load_pipeline

    pipeline = load_pipeline(pipeline.path)
    runner = PipelineRunner(pipeline, artifacts, tmp_path / "out")
    done = {}
    thread = threading.Thread(target=lambda: done.setdefault("result", runner.run()), daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    view = None
    while view is None and time.monotonic() < deadline:
        view = next((s for s in getattr(getattr(runner, "sinks", None), "sinks", []) if s.name == "foxglove" and s.port), None)
        time.sleep(0.05)
    assert view is not None, "the live view did not start"
    yield view
    runner.stop()
    thread.join(timeout=30)
    assert not thread.is_alive() and done["result"].frames > 0


def test_a_websocket_client_receives_the_detections_and_images_while_the_pipeline_runs(running):
    with connected(running.port) as ws:
        client = Client(ws)
        assert ws.subprotocol in SUBPROTOCOLS
        assert client.channels["/detections"]["schemaName"] == "foxglove.ImageAnnotations"
        client.subscribe("/detections", "/camera/image/compressed")
        got = client.receive({"/detections": 5, "/camera/image/compressed": 2})
    assert len(got["/detections"]) >= 5 and len(got["/camera/image/compressed"]) >= 2
    for log_time, message in got["/detections"]:
        # The tiny model's two boxes on every frame (tests/conftest.py): person 0.81 at (12, 9)-(20, 15), then car 0.72.
        texts = [t.text for t in message.texts]
        assert texts == ["person 0.81", "car 0.72"]
        first = [(p.x, p.y) for p in message.points[0].points]
        assert first == [(12.0, 9.0), (20.0, 9.0), (20.0, 15.0), (12.0, 15.0)]
        assert abs(log_time - time.time_ns()) < 60e9  # logged at the wall-clock time of its capture
    frames = sorted(int(dict((kv.key, kv.value) for kv in m.metadata)["frame"]) for _, m in got["/detections"])
    assert len(set(frames)) == len(frames)
    _, image = got["/camera/image/compressed"][0]
    decoded = cv2.imdecode(np.frombuffer(image.data, np.uint8), cv2.IMREAD_COLOR)
    assert image.format == "jpeg" and decoded.shape == (48, 64, 3)  # never wider than the frame


def test_garbage_from_a_client_neither_stops_the_server_nor_the_others(running):
    with connected(running.port) as rogue:
        for junk in ("not json", json.dumps({"op": "subscribe", "subscriptions": "x"}), b"\xff\x00garbage"):
            try:
                rogue.send(junk)
            except Exception:  # noqa: BLE001 - the server may close a rogue client: that is its right
                break
    with connected(running.port) as ws:
        client = Client(ws)
        client.subscribe("/detections")
        assert len(client.receive({"/detections": 3})["/detections"]) >= 3


def test_a_port_already_in_use_is_one_error_naming_it():
    from sdk.sinks.live_view import LiveView

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        view = LiveView(port=port)
        with pytest.raises(SdkError) as caught:
            view.open()
    assert caught.value.message.startswith(f"foxglove sink: cannot serve on 127.0.0.1:{port}: ")
    assert "Address already in use" in caught.value.message and "port" in caught.value.hint


def test_a_client_that_stops_reading_never_holds_up_a_frame():
    from sdk.frame import Frame
    from sdk.postprocess.detections import Detections
    from sdk.sinks.live_view import LiveView

    view = LiveView(port=0, image_fps=1000, image_width=640)  # an image with every frame: the most a client can be sent
    view.open()
    detections = Detections(32, ("person",))
    detections.count = 20
    detections.boxes[:20] = [[i, i, i + 50, i + 80] for i in range(20)]
    noise = np.random.default_rng(0).integers(0, 256, (480, 640, 3), np.uint8)  # incompressible: 100s of kB a JPEG
    try:
        with connected(view.port) as ws:
            client = Client(ws)
            client.subscribe("/detections", "/camera/image/compressed")
            time.sleep(0.2)  # subscribed; from now on it reads nothing, and its socket fills
            took = []
            for i in range(300):
                began = time.perf_counter()
                view.write(Frame(i, time.monotonic_ns(), noise), detections)
                took.append(time.perf_counter() - began)
    finally:
        view.close()
    # A write is a message built and queued (and a copy handed to the encoder thread): about a millisecond, whatever the
    # client does (p99 33 ms on a 2-core host at load 13, where a bare loop's p99 is 13 ms). 300 frames of 100s of kB
    # are far more than a socket holds: a write that waited for the client would wait for ever, not half a second.
    assert max(took) < 0.5 and view.images_sent > 0
