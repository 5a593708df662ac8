"""Benchmark: the runtime's per-frame overhead over a bare loop of the very same calls.

overhead = (runtime loop time per frame) - (bare loop time per frame), where the bare loop
calls the same OpenCV preprocessing, ONNX Runtime inference and SSD postprocessing objects
directly. Both read the same decoded frames from memory and write to a null sink. Rounds
alternate A/B on one machine and one process, so noise hits both; the medians are reported.

    python tests/benchmarks/bench_runtime_overhead.py [--frames 200] [--rounds 7] [--smoke]

Targets (issue #2): overhead <= 5 % of end-to-end and <= 0.3 ms per frame.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import cv2

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import sdk.runtime.cameras as stages_module  # noqa: E402
import sdk.runtime.runner as runner_module  # noqa: E402
from sdk.backends import create_backend  # noqa: E402
from sdk.postprocess import create_postprocessor  # noqa: E402
from sdk.preprocess import CpuPreprocessor  # noqa: E402
from sdk.sinks import NullSink  # noqa: E402
from sdk.sources import FrameReader, FrameStream  # noqa: E402
from sdk.spec import load_pipeline  # noqa: E402
from sdk.spec.schema import NullSink as NullSinkSpec  # noqa: E402
from tools.models.prepare import PrepareModel  # noqa: E402


class MemoryReader(FrameReader):
    def __init__(self, images):
        self.images, self.position = images, 0

    def open(self):
        self.position = 0

    def read(self):
        if self.position >= len(self.images):
            return None
        self.position += 1
        return self.images[self.position - 1]

    def close(self):
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--threads", type=int, default=1, help="ONNX Runtime threads (1: least noise on a shared machine)")
    parser.add_argument("--smoke", action="store_true", help="one short round, tiny sizes, no warm-up: the script runs (CI); numbers mean nothing")
    args = parser.parse_args()
    if args.smoke:
        args.frames, args.rounds = 4, 1

    pipeline = load_pipeline(REPO / "pipelines" / "pedestrian.yaml")
    model = pipeline.spec.model.model_copy(update={"threads": args.threads})
    spec = pipeline.spec.model_copy(update={"sinks": (NullSinkSpec(kind="null"),), "model": model})
    pipeline = type(pipeline)(spec=spec, path=pipeline.path)
    artifacts = PrepareModel(pipeline, Path(tempfile.mkdtemp()) / "cache")()
    capture = cv2.VideoCapture(str(pipeline.source_file()))
    images = [capture.read()[1] for _ in range(args.frames)]
    capture.release()

    def from_memory(uri, replay, base=None, max_frames=None, reconnect=None) -> FrameStream:
        """sdk.sources.open_stream's signature, reading the decoded frames from memory at full speed."""
        return FrameStream(MemoryReader(images), replay.model_copy(update={"rate_fps": None}), max_frames=max_frames, reconnect=reconnect)

    stages_module.open_stream = from_memory  # the sources stage's factory opens the streams

    def runtime_round() -> float:
        out = Path(tempfile.mkdtemp())
        result = runner_module.PipelineRunner(pipeline, artifacts, out, require_jsonl=False).run()
        assert result.frames == len(images)
        return result.wall_s / result.frames

    backend = create_backend(spec.model.backend, artifacts.model_path, threads=spec.model.threads)
    backend.open()
    ((_, buffer),) = backend.inputs.items()
    pre = CpuPreprocessor(spec.preprocess, buffer)
    post = create_postprocessor(spec.postprocess, backend.outputs, (300, 300), artifacts.load_tensors())
    sink = NullSink()

    def bare_round() -> float:
        started = time.perf_counter()
        for image in images:
            geometry = pre(image)
            backend.infer()
            detections = post(geometry)
            sink.write(None, detections)
        return (time.perf_counter() - started) / len(images)

    if not args.smoke:  # the smoke mode's one round is the code path already
        bare_round(), runtime_round()  # warm-up both
    bare, runtime = [], []
    for _ in range(args.rounds):
        bare.append(bare_round())
        runtime.append(runtime_round())
    b, r = statistics.median(bare) * 1e3, statistics.median(runtime) * 1e3
    # Paired differences: each runtime round against the bare round just before it.
    overhead = statistics.median(y - x for x, y in zip(bare, runtime, strict=True)) * 1e3
    print(f"frames per round: {len(images)}, rounds: {args.rounds}, backend: {backend.describe()}")
    print(f"bare loop      : {b:.3f} ms/frame (median; rounds {', '.join(f'{x * 1e3:.2f}' for x in bare)})")
    print(f"runtime loop   : {r:.3f} ms/frame (median; rounds {', '.join(f'{x * 1e3:.2f}' for x in runtime)})")
    print(f"overhead       : {overhead:.3f} ms/frame = {100 * overhead / r:.2f} % of end-to-end (median of paired rounds)")
    ok = overhead <= 0.3 and overhead <= 0.05 * r
    print(f"target (<= 0.3 ms and <= 5 %): {'met' if ok else 'NOT met'}")


if __name__ == "__main__":
    main()
