"""Benchmark: the live view's effect on the frame loop (target: a slow client makes no difference at p99).

The tiny pipeline (tests/conftest.py's constant detector) on a synthetic 640 x 480 source paced at 15 fps
(`late_frames: drop`, so a loaded machine's stall shows as drops, not as a backlog every later frame inherits) runs
through the real frame loop three ways, alternating, in rounds: no live view; the live view (5 images a second,
640 wide) with no client; and the live view with a slow client subscribed to every topic (detections, images,
latency, status) that reads one message every 100 ms, so its socket and the server's queue for it stay full.
Printed: each way's end-to-end p50 / p99 and the sink stage's p99 (where the live view runs in the loop) in ms
over the frames after warm-up, and the frames dropped, medians over the rounds; the load average before and after.

    python tests/benchmarks/bench_live_view.py [--frames 450] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from sdk.runtime import PipelineRunner  # noqa: E402
from sdk.spec import load_pipeline  # noqa: E402
from tests.conftest import PIPELINE, tiny_yolo  # noqa: E402

WARMUP = 30  # frames left out of each run (the smoke mode: 5)


def pipeline_file(folder: Path, frames: int, view: bool) -> Path:
    text = PIPELINE.format(uri=f"synthetic://boxes?width=640&height=480&frames={frames}", rate="15", max_ms=5000)
    text = text.replace("replay: {rate_fps: 15}", "replay: {rate_fps: 15, late_frames: drop}")
    if view:
        text = text.replace("  - {kind: null}", "  - {kind: foxglove, port: 0, image_fps: 5, image_width: 640}")
    path = folder / ("view.yaml" if view else "plain.yaml")
    path.write_text(text)
    return path


def slow_client(port: int, stop: threading.Event, received: list) -> None:
    from websockets.sync.client import connect

    with connect(f"ws://127.0.0.1:{port}", subprotocols=["foxglove.sdk.v1", "foxglove.websocket.v1"], open_timeout=10, ping_interval=None) as ws:
        channels = {}
        deadline = time.monotonic() + 10
        while len(channels) < 4 and time.monotonic() < deadline:
            message = json.loads(ws.recv(timeout=10))
            if message["op"] == "advertise":
                channels.update({c["topic"]: c["id"] for c in message["channels"]})
        subscriptions = [{"id": k, "channelId": cid} for k, cid in enumerate(channels.values(), start=1)]
        ws.send(json.dumps({"op": "subscribe", "subscriptions": subscriptions}))
        while not stop.is_set():
            try:
                ws.recv(timeout=1)
                received[0] += 1
            except TimeoutError:
                continue
            time.sleep(0.1)  # a slow reader


def one_run(pipeline: Path, artifacts, out: Path, client: bool) -> tuple[dict, int]:
    runner = PipelineRunner(load_pipeline(pipeline), artifacts, out, live_view="pipeline")  # as the service serves it
    done: dict = {}
    thread = threading.Thread(target=lambda: done.setdefault("result", runner.run()))
    thread.start()
    stop, received, reader = threading.Event(), [0], None
    if client:
        view = None
        while view is None and thread.is_alive():
            view = next((s for s in getattr(runner.sinks, "sinks", []) if s.name == "foxglove" and s.port), None)
            time.sleep(0.01)
        reader = threading.Thread(target=slow_client, args=(view.port, stop, received), daemon=True)
        reader.start()
    thread.join()
    stop.set()
    if reader is not None:
        reader.join(timeout=5)
        if received[0] == 0:
            raise SystemExit("the slow client received nothing: it did not measure what it says")
    result = done["result"]
    return result.recorder.latencies_ms(skip=WARMUP), result.counters.dropped


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--frames", type=int, default=450, help="frames a run (15 fps: 450 is 30 s)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--smoke", action="store_true", help="20 frames, one round: only that the script runs")
    args = parser.parse_args()
    global WARMUP
    if args.smoke:
        args.frames, args.rounds, WARMUP = 20, 1, 5
    from tools.models.prepare import PrepareModel

    load_before = f"{os.getloadavg()[0]:.1f}"
    with tempfile.TemporaryDirectory() as folder:
        base = Path(folder)
        tiny_yolo(base / "tiny.onnx")
        plain, view = pipeline_file(base, args.frames, False), pipeline_file(base, args.frames, True)
        artifacts = PrepareModel(load_pipeline(plain), base / "cache")()
        ways = {"no live view": (plain, False), "live view, no client": (view, False), "live view, slow client": (view, True)}
        figures: dict[str, list] = {way: [] for way in ways}
        for round_ in range(args.rounds):  # alternating: this machine is shared
            for way, (path, client) in ways.items():
                ms, dropped = one_run(path, artifacts, base / f"out-{round_}-{len(figures[way])}", client)
                e2e = ms["end_to_end"]
                figures[way].append((np.percentile(e2e, 50), np.percentile(e2e, 99), np.percentile(ms["sink"], 99), dropped))
        print(f"frame loop, 640x480 at 15 fps, {args.frames} frames a run ({WARMUP} warm-up), median of {args.rounds} rounds")
        print(f"load average before {load_before}, after {os.getloadavg()[0]:.1f}:")
        for way, runs in figures.items():
            p50, p99, sink, dropped = (statistics.median(r[k] for r in runs) for k in range(4))
            each = ", ".join(f"{r[1]:.1f}" for r in runs)
            print(f"  {way:24s} end to end p50 {p50:5.1f} ms, p99 {p99:6.1f} ms (rounds: {each}); sink p99 {sink:5.2f} ms; dropped {dropped:.0f}")


if __name__ == "__main__":
    main()
