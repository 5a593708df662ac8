"""Benchmark: memory over a long replay of a recording (target: no growth after warm-up).

A 640 x 480 JPEG CompressedImage topic (60 distinct frames of the example video) in an MCAP file, looped through the
real frame loop (the tests' tiny detector) as fast as it goes, with the JSONL and the mcap sinks writing every frame:
by default 54,000 frames, a 30-minute drive at 30 fps. The process' resident memory is sampled twice a second.
Printed: RSS after warm-up (10 % of the frames) and at the end, the most it reached, and the slope of a least-squares
line through the samples after warm-up, in MB per 10,000 frames.

    python tests/benchmarks/bench_replay_memory.py [--frames 54000]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

import cv2
import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from sdk.runtime import PipelineRunner  # noqa: E402
from sdk.spec import load_pipeline  # noqa: E402
from tests.conftest import PIPELINE, tiny_yolo  # noqa: E402
from tests.sdk.sources.bags import stamps, write_mcap  # noqa: E402


def rss_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--frames", type=int, default=54_000, help="frames replayed (54,000: 30 minutes at 30 fps)")
    parser.add_argument("--smoke", action="store_true", help="100 frames of a topic of 10, looped: only that the script runs")
    args = parser.parse_args()
    if args.smoke:
        args.frames = 100
    from tools.models.prepare import PrepareModel

    with tempfile.TemporaryDirectory() as folder:
        base = Path(folder)
        capture = cv2.VideoCapture(str(REPO / "pipelines" / "assets" / "vtest.avi"))
        images = [cv2.resize(capture.read()[1], (640, 480)) for _ in range(10 if args.smoke else 60)]
        capture.release()
        write_mcap(base / "drive.mcap", images, stamps(len(images), 33.3), encoding="jpeg")
        tiny_yolo(base / "tiny.onnx")
        uri = "mcap://drive.mcap?topic=/camera/image_raw"
        text = PIPELINE.format(uri=uri, rate="null", max_ms=5000)
        text = text.replace("  replay: {rate_fps: null}", f"  replay: {{loop: true, frames: {args.frames}}}")
        text = text.replace("  - {kind: null}", "  - {kind: mcap, path: detections.mcap}")
        (base / "replay.yaml").write_text(text)
        pipeline = load_pipeline(base / "replay.yaml")
        artifacts = PrepareModel(pipeline, base / "cache")()
        done = [0]
        runner = PipelineRunner(pipeline, artifacts, base / "out", on_frame=lambda count: done.__setitem__(0, count))
        samples: list[tuple[int, float]] = []
        stop = threading.Event()

        def sample() -> None:
            while not stop.wait(0.5):
                samples.append((done[0], rss_mb()))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        began = time.monotonic()
        result = runner.run()
        took = time.monotonic() - began
        stop.set()
        sampler.join()
        samples.append((result.frames, rss_mb()))
    warm = [(f, m) for f, m in samples if f >= args.frames // 10]
    frames, mb = np.array([f for f, _ in warm], float), np.array([m for _, m in warm])
    slope = np.polyfit(frames, mb, 1)[0] * 10_000 if len(warm) > 2 and np.ptp(frames) > 0 else float("nan")
    print(f"replayed {result.frames} frames of a 640x480 JPEG topic (looped) in {took:.0f} s, jsonl + mcap sinks:")
    print(f"  RSS after warm-up {mb[0]:.1f} MB, at the end {mb[-1]:.1f} MB, most {mb.max():.1f} MB; slope {slope:+.3f} MB per 10,000 frames")


if __name__ == "__main__":
    main()
