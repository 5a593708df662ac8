"""Benchmark: four cameras batched (one inference call a frame of each) against the same four cameras run
one frame at a time through the same engine, frames per second on the CPU backend (ONNX Runtime).

Both runs are the real runner (sources -> batch -> preprocess -> infer -> decode -> sinks) on the example
detector, with four cameras reading decoded frames of real recordings from memory (vtest.avi and tree.avi,
each twice from different starting frames), unpaced, into a null sink; only `batch.size` differs (`cameras`: the model
prepared with a batch of 4; `1`: with a batch of 1). Rounds alternate A/B in one process, so noise hits
both; the medians are reported.

    python tests/benchmarks/bench_multicam.py [--frames 40] [--rounds 5] [--threads 2] [--smoke]

Target (issue #19): batched >= 1.3x the one-at-a-time frames per second.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import cv2

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import sdk.runtime.cameras as stages_module  # noqa: E402
from sdk.runtime.runner import PipelineRunner  # noqa: E402
from sdk.sources import FrameReader, FrameStream  # noqa: E402
from sdk.spec import load_pipeline  # noqa: E402
from sdk.spec.cameras import Batch  # noqa: E402
from sdk.spec.schema import CameraSource  # noqa: E402
from sdk.spec.schema import NullSink as NullSinkSpec  # noqa: E402
from tools.models.prepare import PrepareModel  # noqa: E402

RECORDINGS = {
    "front": REPO / "pipelines" / "assets" / "vtest.avi",
    "rear": REPO / "tests" / "integration" / "assets" / "tree.avi",
    "left": REPO / "pipelines" / "assets" / "vtest.avi",
    "right": REPO / "tests" / "integration" / "assets" / "tree.avi",
}


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


def decoded(path: Path, frames: int, skip: int) -> list:
    capture = cv2.VideoCapture(str(path))
    images = [capture.read()[1] for _ in range(frames + skip)][skip:]
    capture.release()
    return images


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=40, help="frames per camera and round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2, help="ONNX Runtime intra-op threads (the example pipeline's)")
    parser.add_argument("--wait-ms", type=float, default=1000.0, help="batch.wait_ms (frames are in memory: no camera is late)")
    parser.add_argument("--smoke", action="store_true", help="one short round, tiny sizes, no warm-up: the script runs (CI); numbers mean nothing")
    args = parser.parse_args()
    if args.smoke:
        args.frames, args.rounds = 1, 1

    base = load_pipeline(REPO / "pipelines" / "pedestrian.yaml")
    if args.frames > 48:
        parser.error("--frames: at most 48 (OpenCV decodes 68 frames of tree.avi; the right camera starts at its 20th)")
    skips = {"front": 0, "rear": 0, "left": 120, "right": 20}
    images = {name: decoded(path, args.frames, skip=skips[name]) for name, path in RECORDINGS.items()}
    uris = {name: f"file://assets/{name}.avi" for name in RECORDINGS}  # names only: the frames come from memory

    def pipeline(size):
        sources = {name: CameraSource(uri=uri) for name, uri in uris.items()}
        model = base.spec.model.model_copy(update={"threads": args.threads})
        update = {"source": None, "sources": sources, "sinks": (NullSinkSpec(kind="null"),), "model": model}
        spec = base.spec.model_copy(update={**update, "batch": Batch(size=size, wait_ms=args.wait_ms)})
        return type(base)(spec=spec, path=base.path)

    by_uri = {uri: images[name] for name, uri in uris.items()}

    def from_memory(uri, replay, base_folder=None, max_frames=None, reconnect=None) -> FrameStream:
        """sdk.sources.open_stream's signature, reading one camera's decoded frames from memory at full speed."""
        return FrameStream(MemoryReader(by_uri[uri]), replay.model_copy(update={"rate_fps": None}), max_frames=max_frames, reconnect=reconnect)

    stages_module.open_stream = from_memory
    cache = Path(tempfile.mkdtemp()) / "cache"
    runs = {}
    for label, size in (("batched", "cameras"), ("one at a time", 1)):
        p = pipeline(size)
        runs[label] = (p, PrepareModel(p, cache)())

    def round_fps(label: str) -> tuple[float, object]:
        p, artifacts = runs[label]
        result = PipelineRunner(p, artifacts, Path(tempfile.mkdtemp()), require_jsonl=False).run()
        assert result.frames == len(RECORDINGS) * args.frames, {n: c.recorder.count for n, c in result.cameras.items()}
        return result.frames / result.wall_s, result

    for label in runs if not args.smoke else ():  # warm-up both (the smoke mode's one round is the code path already)
        round_fps(label)
    fps: dict[str, list[float]] = {label: [] for label in runs}
    notes = {}
    for _ in range(args.rounds):
        for label in runs:
            value, result = round_fps(label)
            fps[label].append(value)
            notes[label] = (result.batching, result.backend, {n: c.skipped_slots for n, c in result.cameras.items()})
    medians = {label: statistics.median(values) for label, values in fps.items()}
    print(f"cameras: {len(RECORDINGS)}, frames per camera and round: {args.frames}, rounds: {args.rounds}, backend: {notes['batched'][1]}")
    for label, values in fps.items():
        print(f"{label:14}: {medians[label]:7.2f} frames/s (median; rounds {', '.join(f'{v:.2f}' for v in values)}) - {notes[label][0]}")
    print(f"skipped slots (batched): {notes['batched'][2]}")
    speedup = medians["batched"] / medians["one at a time"]
    print(f"speed-up      : {speedup:.2f}x")
    print(f"target (batched >= 1.3x): {'met' if speedup >= 1.3 else 'NOT met'}")


if __name__ == "__main__":
    main()
