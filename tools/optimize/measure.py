"""Speed on this machine's CPU backend, measured in the same run for every model, in alternating rounds.

Each round runs every model (original first in even rounds, last in odd ones) for the same number of inferences on the
same frame; a model's time is the median over rounds of its mean per round. Ratios come from one run, so a machine
busy with other work slows every model alike; the spread of the per-round ratios says how steady the run was.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Timing:
    median_ms: float
    rounds_ms: tuple[float, ...]

    def as_dict(self) -> dict:
        return {"median_ms": round(self.median_ms, 4), "rounds_ms": [round(r, 4) for r in self.rounds_ms]}


def alternate(models: dict[str, bytes], frame: np.ndarray, threads: int | None, spinning: bool, rounds: int = 7, runs: int = 10,
              warmup: int = 3, tick=None) -> dict[str, Timing]:  # fmt: skip
    """name -> Timing, every model measured in every round (serialized ONNX models); `tick()` after each round."""
    import onnxruntime as ort

    from sdk.backends.onnxruntime_cpu import session_options

    sessions = {}
    for name, model in models.items():
        options = session_options(threads, spinning=spinning)
        options.log_severity_level = 3
        session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
        feed = {session.get_inputs()[0].name: frame}
        for _ in range(warmup):
            session.run(None, feed)
        sessions[name] = (session, feed)
    names = list(models)
    per_round: dict[str, list[float]] = {name: [] for name in names}
    for number in range(rounds):
        for name in names if number % 2 == 0 else reversed(names):
            session, feed = sessions[name]
            started = time.perf_counter()
            for _ in range(runs):
                session.run(None, feed)
            per_round[name].append((time.perf_counter() - started) * 1000 / runs)
        if tick is not None:
            tick()
    return {name: Timing(float(np.median(values)), tuple(values)) for name, values in per_round.items()}


def ratio_spread(original: Timing, candidate: Timing) -> tuple[float, float]:
    """The lowest and highest per-round ratio original / candidate."""
    ratios = [a / b for a, b in zip(original.rounds_ms, candidate.rounds_ms, strict=True) if b > 0]
    return (min(ratios), max(ratios)) if ratios else (0.0, 0.0)
