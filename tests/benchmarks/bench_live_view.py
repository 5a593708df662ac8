"""Benchmark: the live view's effect on the frame loop (target: a slow client makes no difference at p99).

The tiny pipeline (tests/conftest.py's constant detector) on a synthetic 1280 x 720 source paced at 30 fps runs
through the real frame loop three ways, alternating, in rounds: no live view; the live view (5 images a second,
640 wide) with no client; and the live view with a slow client subscribed to every topic (detections, images,
latency, status) that reads one message every 100 ms, so its socket and the server's queue for it stay full.
Printed: each way's end-to-end p50 / p99 / max in ms over the frames after warm-up, medians over the rounds.

    python tests/benchmarks/bench_live_view.py [--frames 600] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
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
    text = PIPELINE.format(uri=f"synthetic://boxes?width=1280&height=720&frames={frames}", rate="30", max_ms=5000)
    if view:
        text = text.replace("  - {kind: null}", "  - {kind: foxglove, port: 0, image_fps: 5, image_width: 640}")
    path = folder / ("view.yaml" if view else "plain.yaml")
    path.write_text(text)
    return path


def slow_client(port: int, stop: threading.Event, received: list) -> None:
    from websockets.sync.client import connect

    with connect(f"ws://127.0.0.1:{port}", subprotocols=["foxglove.sdk.v1", "foxglove.websocket.v1"], open_timeout=10) as ws:
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


def one_run(pipeline: Path, artifacts, out: Path, client: bool) -> np.ndarray:
    runner = PipelineRunner(load_pipeline(pipeline), artifacts, out)
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
    return done["result"].recorder.latencies_ms(skip=WARMUP)["end_to_end"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--frames", type=int, default=600, help="frames a run (30 fps: 600 is 20 s)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--smoke", action="store_true", help="20 frames, one round: only that the script runs")
    args = parser.parse_args()
    global WARMUP
    if args.smoke:
        args.frames, args.rounds, WARMUP = 20, 1, 5
    from tools.models.prepare import PrepareModel

    with tempfile.TemporaryDirectory() as folder:
        base = Path(folder)
        tiny_yolo(base / "tiny.onnx")
        plain, view = pipeline_file(base, args.frames, False), pipeline_file(base, args.frames, True)
        artifacts = PrepareModel(load_pipeline(plain), base / "cache")()
        ways = {"no live view": (plain, False), "live view, no client": (view, False), "live view, slow client": (view, True)}
        figures: dict[str, list] = {way: [] for way in ways}
        for round_ in range(args.rounds):  # alternating: this machine is shared
            for way, (path, client) in ways.items():
                e2e = one_run(path, artifacts, base / f"out-{round_}-{len(figures[way])}", client)
                figures[way].append((np.percentile(e2e, 50), np.percentile(e2e, 99), e2e.max()))
        print(f"frame loop end to end, 1280x720 at 30 fps, {args.frames} frames a run ({WARMUP} warm-up), median of {args.rounds} rounds:")
        for way, runs in figures.items():
            p50, p99, top = (statistics.median(r[k] for r in runs) for k in range(3))
            each = ", ".join(f"{r[1]:.2f}" for r in runs)
            print(f"  {way:24s} p50 {p50:6.2f} ms  p99 {p99:6.2f} ms  max {top:6.2f} ms   (p99 of each round: {each})")


if __name__ == "__main__":
    main()
