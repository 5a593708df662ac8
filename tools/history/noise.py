"""How much runs of one release differ by themselves on one device class: the run-to-run spread, from the history.

Frames resampled within one run cannot see what moves a whole run: the clocks it got, the other work on the machine,
the heat. Runs of the same release on the same device class can. For each figure the history gives the pooled
standard deviation of its logarithm within releases (every release of the pipeline on that class with two runs or
more counts, each about its own mean), with its degrees of freedom; a comparison widens its intervals to what that
spread allows. Without such runs the intervals rest on the frames alone, and the comparison says so.
"""

from __future__ import annotations

import math
import sqlite3
from dataclasses import dataclass
from functools import lru_cache
from statistics import NormalDist

import numpy as np

MAX_RUNS = 500  # the newest runs of the class are enough to know its spread
MIN_VALUE = 1e-9


@dataclass(frozen=True)
class Spread:
    """The pooled within-release standard deviation of log(figure), on `degrees` degrees of freedom from `runs` runs."""

    sd: float
    degrees: int
    runs: int

    def log_half_width(self, alpha: float, runs_a: int, runs_b: int) -> float:
        """Half-width of a (1 - alpha) interval for log(B / A), sides of runs_a and runs_b runs."""
        return t_quantile(1 - alpha / 2, self.degrees) * self.sd * math.sqrt(1 / runs_a + 1 / runs_b)


def figure_values(connection: sqlite3.Connection, pipeline: str, device_classes: tuple[str, ...]) -> dict[str, dict[tuple, list[float]]]:
    """figure name -> (release, device class) -> values, over the newest runs of this pipeline on these device classes."""
    marks = ",".join("?" for _ in device_classes)
    ids = [
        row[0]
        for row in connection.execute(
            f"SELECT id FROM runs WHERE pipeline = ? AND device_class IN ({marks}) AND release IS NOT NULL AND measured_frames > 0 "
            "ORDER BY started_at DESC LIMIT ?",
            (pipeline, *device_classes, MAX_RUNS),
        )
    ]
    if not ids:
        return {}
    marks = ",".join("?" for _ in ids)
    found: dict[str, dict[tuple, list[float]]] = {}
    rows = connection.execute(
        f"SELECT r.release, r.device_class, s.stage, s.p50_ms, s.p99_ms FROM stages s JOIN runs r ON r.id = s.run_id WHERE s.run_id IN ({marks})",
        ids,
    )
    for release, device_class, stage, p50, p99 in rows:
        prefix = stage if stage == "end_to_end" else f"stages.{stage}"
        for key, value in (("p50_ms", p50), ("p99_ms", p99)):
            if value is not None:
                found.setdefault(f"{prefix}.{key}", {}).setdefault((release, device_class), []).append(float(value))
    sql = f"SELECT release, device_class, miss_ratio FROM runs WHERE id IN ({marks}) AND miss_ratio IS NOT NULL"
    for release, device_class, ratio in connection.execute(sql, ids):
        found.setdefault("deadline.miss_ratio", {}).setdefault((release, device_class), []).append(float(ratio))
    return found


def spreads(connection: sqlite3.Connection, pipeline: str, device_classes) -> dict[str, Spread]:
    """figure name -> its run-to-run spread on these device classes (runs of one release on one class vary about their
    own mean), where at least one release has two runs or more on one of them."""
    classes = (device_classes,) if isinstance(device_classes, str) else tuple(sorted(device_classes))
    out = {}
    for name, groups in figure_values(connection, pipeline, classes).items():
        spread = pooled(list(groups.values()))
        if spread is not None:
            out[name] = spread
    return out


def pooled(groups: list[list[float]]) -> Spread | None:
    squares, degrees, runs = 0.0, 0, 0
    for values in groups:
        logs = np.log(np.maximum(np.asarray(values, np.float64), MIN_VALUE))
        if len(logs) < 2:
            continue
        squares += float(((logs - logs.mean()) ** 2).sum())
        degrees += len(logs) - 1
        runs += len(logs)
    if degrees == 0:
        return None
    return Spread(math.sqrt(squares / degrees), degrees, runs)


@lru_cache(maxsize=256)
def t_quantile(p: float, degrees: int) -> float:
    """Student's t quantile (p > 0.5), by bisection on its distribution function (numerical integration of the density)."""
    if degrees > 10_000:
        return NormalDist().inv_cdf(p)
    log_norm = math.lgamma((degrees + 1) / 2) - math.lgamma(degrees / 2) - 0.5 * math.log(degrees * math.pi)

    def tail(x: float) -> float:  # P(T > x): with t = sqrt(nu) tan(theta) the density becomes c sqrt(nu) cos(theta)^(nu - 1)
        theta = np.linspace(math.atan(x / math.sqrt(degrees)), math.pi / 2, 4001)
        values = np.exp(log_norm + 0.5 * math.log(degrees)) * np.cos(theta) ** (degrees - 1)
        return float(np.sum((values[1:] + values[:-1]) / 2 * np.diff(theta)))

    low, high = 0.0, 1.0
    while tail(high) > 1 - p:
        high *= 2
    for _ in range(60):
        middle = (low + high) / 2
        if tail(middle) > 1 - p:
            low = middle
        else:
            high = middle
    return (low + high) / 2
