"""The live view: a real WebSocket client (the `websockets` package) negotiates the Foxglove protocol with the running
pipeline's server, subscribes, and decodes the detections, the camera images, each frame's latency by stage against
its deadline and the run's state it is sent; garbage from a client and a port already taken are handled; a measuring
run serves the view only when asked."""

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
            if channel["encoding"] == "json":  # the latency and the state: JSON with a JSON Schema
                assert json.loads(channel["schema"])["type"] == "object" and channel["schemaEncoding"] == "jsonschema"
                self.decoders[sub_id] = (topic, json)
            else:
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
            got[topic].append((log_time, json.loads(data[13:]) if cls is json else cls.FromString(data[13:])))
        return got


def connected(port: int):
    from websockets.sync.client import connect

    return connect(f"ws://127.0.0.1:{port}", subprotocols=SUBPROTOCOLS, open_timeout=10, close_timeout=1)


@pytest.fixture()
def running(tiny_pipeline, tmp_path):
    """The tiny pipeline running (a synthetic 64 x 48 source at 50 fps) with the live view on a free port."""
    pipeline, artifacts = tiny_pipeline(frames=1500, rate="50")
    text = (pipeline.path.read_text()).replace("  - {kind: jsonl}", "  - {kind: jsonl}\n  - {kind: foxglove, port: 0, image_fps: 20}")
    pipeline.path.write_text(text.replace("  warmup_frames: 2", "  warmup_frames: 2\n  deadline_ms: 0.001"))  # every frame misses
    from sdk.spec import load_pipeline

    pipeline = load_pipeline(pipeline.path)
    runner = PipelineRunner(pipeline, artifacts, tmp_path / "out", live_view="pipeline")  # as the service serves it
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
        client = Client(ws, topics=("/detections", "/camera/image/compressed", "/latency", "/status"))
        assert ws.subprotocol in SUBPROTOCOLS
        assert client.channels["/detections"]["schemaName"] == "foxglove.ImageAnnotations"
        assert (client.channels["/latency"]["schemaName"], client.channels["/status"]["schemaName"]) == ("sdk.FrameLatency", "sdk.RunState")
        client.subscribe("/detections", "/camera/image/compressed", "/latency", "/status")
        got = client.receive({"/detections": 5, "/camera/image/compressed": 2, "/latency": 5, "/status": 1})
    latencies = [m for _, m in got["/latency"]]
    assert len(latencies) >= 5
    for message in latencies:
        stages = message["stages_ms"]
        assert list(stages) == ["queue", "preprocess", "infer", "postprocess", "sink"] and all(v >= 0 for v in stages.values())
        assert message["end_to_end_ms"] == pytest.approx(sum(stages.values()), abs=1e-6)
        assert message["deadline_ms"] == 0.001 and message["missed"] is True and message["camera"] is None
    assert [m["misses"] - m["frame"] for m in latencies] == [1] * len(latencies)  # every frame so far missed (frames count from 0)
    _, status = got["/status"][0]
    assert status["state"] == "RUNNING" and status["frames"] > 0 and status["deadline_misses"]["camera"] > 0
    assert (status["dropped"], status["corrupt_frames"], status["conditions"]) == (0, 0, [])
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


def test_a_measuring_run_serves_the_live_view_only_when_asked(tiny_pipeline, tmp_path):
    from sdk.sinks import live_view_sinks
    from sdk.spec import load_pipeline

    pipeline, artifacts = tiny_pipeline(frames=3)
    with socket.socket() as taken:  # the pipeline's port is taken: a run that served it would stop before its first frame
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        view = f"  - {{kind: foxglove, port: {port}, image_width: 320}}"
        pipeline.path.write_text(pipeline.path.read_text().replace("  - {kind: null}", view))
        pipeline = load_pipeline(pipeline.path)
        runner = PipelineRunner(pipeline, artifacts, tmp_path / "out", live_view=None)  # deploy without --live-view
        assert runner.run().frames == 3 and [s.name for s in runner.sinks.sinks] == ["jsonl"]
    specs = pipeline.spec.sinks
    asked = live_view_sinks(specs, 9000)  # deploy --live-view 9000: the pipeline's view, on the port asked for
    assert [(s.kind, getattr(s, "port", None), getattr(s, "image_width", None)) for s in asked] == [("jsonl", None, None), ("foxglove", 9000, 320)]
    plain = live_view_sinks(specs[:1], 0)  # a pipeline without one: the defaults, on the port asked for
    assert [(s.kind, getattr(s, "host", None), getattr(s, "port", None)) for s in plain] == [("jsonl", None, None), ("foxglove", "127.0.0.1", 0)]


def test_deploy_passes_the_live_view_port_to_the_measured_run():
    from tools.cli.parser import build_parser
    from tools.connect.session_protocol import run_arguments

    args = build_parser().parse_args(["deploy", "p.yaml", "--target", "local", "--live-view", "8765"])
    assert args.live_view == 8765
    argv = run_arguments("rel", "runs/validation", "local", None, None, args.live_view)
    assert argv[argv.index("--live-view") + 1] == "8765" and "--live-view" not in run_arguments("rel", "runs/v", "local", None)


def test_the_views_thread_survives_a_failed_turn_and_reads_the_misses_from_a_snapshot():
    from sdk.sinks.live_view import LiveView

    class Growing(dict):  # iterating it as the frame loop adds a camera meanwhile would
        def items(self):
            raise RuntimeError("dictionary changed size during iteration")

    class Channel:
        def __init__(self):
            self.sent, self.failed = [], False

        def has_sinks(self):
            return True

        def log(self, state, log_time):
            if not self.failed:
                self.failed = True
                raise OSError("client went away")
            self.sent.append(state)

    view = LiveView(port=0)
    view.counter.misses = Growing({"front": 2})
    view._status_channel, view.status_interval_s = Channel(), 0.01
    thread = threading.Thread(target=view._encode_loop)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not view._status_channel.sent and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        view.close()
        thread.join(timeout=5)
    state = view._status_channel.sent[0]
    assert state["deadline_misses"] == {"front": 2}
    assert state["live_view"]["errors"] == 1 and state["live_view"]["last_error"] == "OSError: client went away"


def test_the_sink_logs_one_message_at_a_time_from_the_frame_loop_and_its_thread():
    """foxglove-sdk reports a client's full backlog through Python's logging (which needs the interpreter's lock)
    while it holds that client's lock: two threads of the sink logging at once could each hold what the other waits
    for, and the process would stop (seen once in CI: the frame loop and the image thread, both inside `log`). So the
    frame loop's detections and latency and the view thread's images and state go out one at a time."""
    import foxglove

    from sdk.frame import Frame
    from sdk.postprocess.detections import Detections
    from sdk.sinks.live_view import LiveView
    from sdk.sinks.mcap_sink import message_classes

    class Channel:  # a channel with a subscriber whose log takes a while: any overlap would be caught
        inside, most, count = 0, 0, 0
        guard = threading.Lock()

        def has_sinks(self):
            return True

        def log(self, message, log_time):
            with Channel.guard:
                Channel.inside += 1
                Channel.most, Channel.count = max(Channel.most, Channel.inside), Channel.count + 1
            time.sleep(0.002)
            with Channel.guard:
                Channel.inside -= 1

    view = LiveView(port=0, image_fps=1000)
    view._messages, view._server = message_classes(foxglove), object()  # no server: the channels are the stand-ins
    view._channels, view._latency, view._image_channels = {None: Channel()}, {None: Channel()}, {None: Channel()}
    view._status_channel, view.status_interval_s = Channel(), 0.001
    thread = threading.Thread(target=view._encode_loop)
    thread.start()
    detections = Detections(4, ("person",))
    image = np.zeros((48, 64, 3), np.uint8)
    try:
        for i in range(100):
            frame = Frame(i, time.monotonic_ns(), image)
            view.write(frame, detections)
            view.timed(frame, [frame.t_capture_ns + k * 100_000 for k in range(6)])  # capture, pickup and each stage's end
            time.sleep(0.001)  # a frame's other work: the view's thread gets its turns
    finally:
        view._server = None  # close() would stop a server
        view.close()
        thread.join(timeout=5)
    assert view.images_sent > 5 and Channel.count > 200  # both threads logged, many times
    assert Channel.most == 1
