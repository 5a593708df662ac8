"""Benchmark: the INT8 Q/DQ model against the FP32 model on ONNX Runtime CPU (what `precision: int8`
runs on `--target local`), same frames, alternating rounds, median per-frame time of each.

    python tests/benchmarks/bench_int8_cpu.py [--frames 60] [--rounds 5] [--threads 2] [--calibration-frames 64] [--smoke]

`--smoke`: 2 frames, one round and no warm-up, 4 calibration and 4 held-out frames of a 30-frame cut of the clip.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from sdk.backends.onnxruntime_cpu import OnnxRuntimeBackend  # noqa: E402
from sdk.spec import load_pipeline  # noqa: E402
from tests.benchmarks.smoke import short_clip  # noqa: E402
from tools.int8.calibrate import Calibrate, preprocessed_frames  # noqa: E402
from tools.models.prepare import PrepareModel  # noqa: E402
from tools.progress import SilentProgress  # noqa: E402


def per_frame_ms(backend: OnnxRuntimeBackend, frames: list[np.ndarray]) -> float:
    (buffer,) = backend.inputs.values()
    started = time.perf_counter()
    for frame in frames:
        np.copyto(buffer, frame)
        backend.infer()
    return (time.perf_counter() - started) / len(frames) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--calibration-frames", type=int, default=64)
    parser.add_argument("--smoke", action="store_true", help="one short round with tiny sizes: proves the script runs (CI); its numbers mean nothing")
    args = parser.parse_args()
    holdout = 50
    if args.smoke:
        args.frames, args.rounds, args.calibration_frames, holdout = 2, 1, 4, 4
    work = Path(tempfile.mkdtemp(prefix="bench-int8-"))
    try:
        shutil.copytree(REPO / "pipelines" / "assets", work / "p" / "assets")
        if args.smoke:
            short_clip(work / "p" / "assets" / "vtest.avi", 30)
        text = (REPO / "pipelines" / "pedestrian.yaml").read_text()
        text = text.replace("  frames: 300 ", f"  frames: {args.calibration_frames} ").replace("method: percentile ", "method: minmax ")
        text = text.replace("stride: 1\n", "stride: 3\n").replace("holdout_frames: 50 ", f"holdout_frames: {holdout} ")
        (work / "p" / "p.yaml").write_text(text)
        pipeline = load_pipeline(work / "p" / "p.yaml")
        model = PrepareModel(pipeline, work / "cache")()
        int8 = Calibrate(pipeline, model, work / "cache")()
        frames = list(preprocessed_frames(pipeline, set(range(0, 3 * args.frames, 3)), (1, 3, 300, 300), SilentProgress()).values())
        fp32_times, int8_times = [], []
        with OnnxRuntimeBackend(model.model_path, threads=args.threads) as fp32, OnnxRuntimeBackend(int8.qdq_model, threads=args.threads) as qdq:
            if not args.smoke:  # the smoke mode's one round is the code path already
                per_frame_ms(fp32, frames[:5]), per_frame_ms(qdq, frames[:5])  # warm-up
            for _ in range(args.rounds):
                fp32_times.append(per_frame_ms(fp32, frames))
                int8_times.append(per_frame_ms(qdq, frames))
        a, b = statistics.median(fp32_times), statistics.median(int8_times)
        print(f"ONNX Runtime CPU, {args.threads} threads, {len(frames)} frames x {args.rounds} alternating rounds")
        print(f"FP32 {a:.2f} ms/frame, INT8 Q/DQ {b:.2f} ms/frame: INT8/FP32 = {b / a:.2f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
