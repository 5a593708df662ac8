"""Benchmark: the tracker's cost per frame (sdk/track, ByteTrack) at 50 detections a frame.

A scene of 50 people walking at constant velocity over a 1920 x 1080 camera, their boxes jittered by a pixel or
two like a detector's, scores spread over both associations (a fifth of them low-score, under high_score), a
few missed each frame (occlusion) and a few false detections: about 50 tracks matched, lost and born every frame.
Each round replays the same frames through a new tracker; the per-frame times of `update()` (the whole stage:
both associations, the Kalman filters, the ids) are pooled after a warm-up, and their median and p99 reported, as
the thread's CPU time (the cost, which a loaded machine does not inflate much) and as wall time.

    python tests/benchmarks/bench_tracker.py [--detections 50] [--frames 1000] [--rounds 5] [--smoke]

Target (issue 19): under 0.5 ms per frame at 50 detections on this machine.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from sdk.postprocess.detections import Detections  # noqa: E402
from sdk.spec.track import Track  # noqa: E402
from sdk.track import create_tracker  # noqa: E402

TARGET_MS = 0.5
WARMUP = 30


def scene(objects: int, frames: int, seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per frame: boxes [N, 4] float32 and scores [N], best first (as NMS leaves them)."""
    rng = np.random.default_rng(seed)
    size = rng.uniform([30, 70], [90, 220], (objects, 2))
    position = rng.uniform([0, 0], [1920, 1080], (objects, 2))
    velocity = rng.normal(0, 3, (objects, 2))
    strength = rng.uniform(0.35, 1.0, objects)  # some people are seen weakly (far, partly hidden)
    out = []
    for _ in range(frames):
        position = (position + velocity) % [1920, 1080]
        seen = rng.random(objects) > 0.04
        centre = position[seen] + rng.normal(0, 1.0, (seen.sum(), 2))
        half = size[seen] / 2 * rng.normal(1, 0.02, (seen.sum(), 1))
        boxes = np.concatenate([centre - half, centre + half], axis=1)
        scores = np.clip(strength[seen] + rng.normal(0, 0.05, seen.sum()), 0.3, 1.0)
        ghosts = rng.integers(0, 3)  # false detections at random places
        ghost_centre = rng.uniform([0, 0], [1920, 1080], (ghosts, 2))
        boxes = np.concatenate([boxes, np.concatenate([ghost_centre - 40, ghost_centre + 40], axis=1)])
        scores = np.concatenate([scores, rng.uniform(0.3, 0.7, ghosts)])
        order = np.argsort(-scores, kind="stable")
        out.append((boxes[order].astype(np.float32), scores[order].astype(np.float32)))
    return out


def round_times(frames, capacity: int) -> tuple[list[float], list[float], int]:
    """Per frame after the warm-up: wall time and this thread's CPU time of update(), ms; confirmed tracks at the end."""
    detections = Detections(capacity, ("person",))
    wall, cpu = [], []
    with create_tracker(Track()) as tracker:
        for boxes, scores in frames:
            n = len(scores)
            detections.boxes[:n], detections.scores[:n], detections.class_ids[:n] = boxes, scores, 0
            detections.count = n
            started, started_cpu = time.perf_counter_ns(), time.thread_time_ns()
            tracker.update(detections)
            cpu.append((time.thread_time_ns() - started_cpu) / 1e6)
            wall.append((time.perf_counter_ns() - started) / 1e6)
        return wall[WARMUP:], cpu[WARMUP:], tracker.confirmed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--detections", type=int, default=50, help="people in the scene (detections a frame, about)")
    parser.add_argument("--frames", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--smoke", action="store_true", help="one short round: proves the script runs (CI); its numbers mean nothing")
    args = parser.parse_args()
    if args.smoke:
        args.frames, args.rounds = WARMUP + 20, 1
    frames = scene(args.detections, args.frames)
    per_frame = statistics.mean(len(s) for _, s in frames)
    wall, cpu, confirmed = [], [], 0
    for _ in range(args.rounds):
        round_wall, round_cpu, confirmed = round_times(frames, capacity=args.detections * 2)
        wall += round_wall
        cpu += round_cpu
    print(f"tracker: ByteTrack, {per_frame:.1f} detections a frame, {confirmed} confirmed tracks at the end, {len(wall)} frames timed")
    # The CPU time is the stage's cost; the wall time adds what other processes took of the CPU meanwhile.
    for name, times in (("CPU time", cpu), ("wall time", wall)):
        times.sort()
        p99 = times[min(len(times) - 1, int(0.99 * len(times)))]
        print(f"{name} per frame: median {statistics.median(times):.3f} ms, p99 {p99:.3f} ms, max {times[-1]:.3f} ms")
    median = statistics.median(cpu)
    verdict = "" if args.smoke else f": {'PASS' if median < TARGET_MS else 'FAIL'}"
    print(f"target: median under {TARGET_MS} ms at {args.detections} detections{verdict}")


if __name__ == "__main__":
    main()
