"""Benchmark: recorded drives in and out.

1. Reading: frames per second out of a 1080p CompressedImage (JPEG) MCAP topic through the mcap:// source, against
   OpenCV reading the same frames from an MP4 (MPEG-4 part 2) through file:// (target: at least as fast).
2. The mcap sink's cost per frame (foxglove.ImageAnnotations, 10 boxes; vision_msgs/msg/Detection2DArray with
   `messages: vision_msgs`), and with `images: true` (a JPEG per frame), against the JSONL sink's.

    python tests/benchmarks/bench_recordings.py [--frames 120] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import cv2
import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from sdk.frame import Frame  # noqa: E402
from sdk.postprocess.detections import Detections  # noqa: E402
from sdk.sources import FrameStream, open_reader  # noqa: E402
from sdk.spec.schema import Replay  # noqa: E402
from tests.sdk.sources.bags import stamps, write_mcap  # noqa: E402


def frames_1080p(count: int) -> list[np.ndarray]:
    capture = cv2.VideoCapture(str(REPO / "pipelines" / "assets" / "vtest.avi"))
    out = []
    while len(out) < count:
        ok, image = capture.read()
        if not ok:
            capture.set(cv2.CAP_PROP_POS_FRAMES, 0)
            continue
        out.append(cv2.resize(image, (1920, 1080)))
    capture.release()
    return out


def read_fps(uri: str, base: Path) -> float:
    stream = FrameStream(open_reader(uri, base), Replay())
    began = time.perf_counter()
    with stream:
        count = sum(1 for _ in stream)
    return count / (time.perf_counter() - began)


def sink_us(sink, frame_count: int, image: np.ndarray) -> float:
    detections = Detections(16, ("person", "car"))
    detections.count = 10
    detections.boxes[:10] = [[100 + 10 * i, 100, 200 + 10 * i, 300] for i in range(10)]
    detections.scores[:10] = 0.9
    sink.open()
    began = time.perf_counter()
    for i in range(frame_count):
        sink.write(Frame(i, time.monotonic_ns(), image, stamp_ns=1_700_000_000_000_000_000 + i * 33_000_000, frame_id="cam"), detections)
    took = time.perf_counter() - began
    sink.close()
    return took / frame_count * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--frames", type=int, default=120)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--smoke", action="store_true", help="4 frames, one round: only that the script runs")
    args = parser.parse_args()
    if args.smoke:
        args.frames, args.rounds = 4, 1
    from sdk.sinks.jsonl import JsonlSink
    from sdk.sinks.mcap_sink import McapSink

    with tempfile.TemporaryDirectory() as folder:
        base = Path(folder)
        images = frames_1080p(args.frames)
        writer = cv2.VideoWriter(str(base / "drive.mp4"), cv2.VideoWriter_fourcc(*"mp4v"), 30, (1920, 1080))
        for image in images:
            writer.write(image)
        writer.release()
        write_mcap(base / "drive.mcap", images, stamps(args.frames, 33.3), encoding="jpeg")
        mcap, mp4 = [], []
        for _ in range(args.rounds):  # alternating: this machine is shared
            mcap.append(read_fps("mcap://drive.mcap?topic=/camera/image_raw", base))
            mp4.append(read_fps("file://drive.mp4", base))
        rounds = f"median of {args.rounds}"
        print(f"1080p read: mcap:// JPEG {statistics.median(mcap):.1f} fps, file:// MP4 (mp4v) {statistics.median(mp4):.1f} fps ({rounds})")
        costs = {"jsonl": [], "mcap": [], "mcap vision_msgs": [], "mcap images": []}
        for _ in range(args.rounds):
            costs["jsonl"].append(sink_us(JsonlSink(base / "d.jsonl"), args.frames, images[0]))
            costs["mcap"].append(sink_us(McapSink(base / "d.mcap"), args.frames, images[0]))
            costs["mcap vision_msgs"].append(sink_us(McapSink(base / "r.mcap", messages="vision_msgs"), args.frames, images[0]))
            costs["mcap images"].append(sink_us(McapSink(base / "i.mcap", images=True), args.frames, images[0]))
        print("sink cost per 1080p frame, 10 boxes: " + ", ".join(f"{k} {statistics.median(v):.0f} us" for k, v in costs.items()))


if __name__ == "__main__":
    main()
