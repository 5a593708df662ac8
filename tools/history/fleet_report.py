"""The fleet report: what `fleet.json` says beyond each target's verdict, for a fleet deploy or `sdk validate --target GROUP`.

Devices are grouped by device class (platform, module, power mode: tools/history/record.py); for each class, the
spread of every figure across its devices (least, median, most), and its outliers: a device whose end-to-end p99 (or
p50) lies outside the class's spread. The spread a device is judged against is its class-mates' own: the range their
figure's confidence intervals cover (bootstrap over each device's frames), widened by a tolerance, so a class of
devices that measure alike on a noisy bench names nobody, and one device that is slower than all the others by more
than the noise of their runs is named. A class needs three devices for that: with two, nobody can tell which is off.
The outliers do not change the fleet's exit code (the worst verdict, as before); they say where to look.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from tools.history.record import describe
from tools.history.samples import load_run
from tools.history.stats import SEED, quantile_replicates

OUTLIER_FIGURES = (("end_to_end.p99_ms", 0.99), ("end_to_end.p50_ms", 0.5))
TOLERANCE = 0.10  # beyond the class-mates' intervals by more than this share of their median
CONFIDENCE = 0.95
MIN_CLASS = 3


def device_entry(folder: Path, rng: np.random.Generator) -> dict | None:
    """A device's class and figures, with the interval of each outlier figure; None without a report."""
    try:
        row, _, stages = describe(folder)
        run = load_run(folder)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    figures = {}
    for stage, values in stages.items():
        if stage == "queue":
            continue
        prefix = "end_to_end" if stage == "end_to_end" else f"stages.{stage}"
        for key in ("p50_ms", "p99_ms"):
            if values.get(key) is not None:
                figures[f"{prefix}.{key}"] = values[key]
    for key in ("miss_ratio", "recall", "precision"):
        if row.get(key) is not None:
            figures[("deadline." if key == "miss_ratio" else "accuracy.") + key] = row[key]
    intervals = {}
    e2e = run.latencies.get("end_to_end")
    if e2e is not None and len(e2e) > 1:
        replicates = quantile_replicates(e2e, tuple(q for _, q in OUTLIER_FIGURES), rng)
        alpha = 1 - CONFIDENCE
        for (name, _), replicate in zip(OUTLIER_FIGURES, replicates, strict=False):
            low, high = np.quantile(replicate.draws, [alpha / 2, 1 - alpha / 2])
            intervals[name] = [round(float(low), 4), round(float(high), 4)]
    return {"device_class": row["device_class"], "figures": figures, "intervals": intervals}


def summarise(outcomes: list[dict]) -> dict:
    """`outcomes`: the fleet's targets (target, verdict, report_dir, ...). Returns the keys fleet.json gains:
    `devices` (per target: verdict, device class, figures), `classes` (spread per figure) and `outliers`."""
    rng = np.random.default_rng(SEED)
    devices = []
    for outcome in outcomes:
        entry = device_entry(Path(outcome["report_dir"]), rng) if outcome.get("verdict") else None
        devices.append({"target": outcome["target"], "verdict": outcome.get("verdict"), "error": outcome.get("error"), **(entry or {})})
    classes: dict[str, dict] = {}
    for device in devices:
        if device.get("device_class"):
            classes.setdefault(device["device_class"], {"devices": []})["devices"].append(device)
    outliers = []
    for name, members in classes.items():
        members["figures"] = spread_of(members["devices"])
        outliers += [dict(o, device_class=name) for o in outliers_of(members["devices"])]
        members["devices"] = [d["target"] for d in members["devices"]]
    return {"devices": devices, "classes": classes, "outliers": outliers, "outlier_rule": rule()}


def spread_of(devices: list[dict]) -> dict:
    names = sorted({n for d in devices for n in d.get("figures", {})})
    out = {}
    for name in names:
        values = {d["target"]: d["figures"][name] for d in devices if d.get("figures", {}).get(name) is not None}
        if values:
            ordered = sorted(values.values())
            out[name] = {
                "devices": len(values),
                "least": ordered[0],
                "median": float(np.median(ordered)),
                "most": ordered[-1],
                "least_device": min(values, key=values.get),
                "most_device": max(values, key=values.get),
            }
    return out


def outliers_of(devices: list[dict]) -> list[dict]:
    """Devices whose interval lies wholly outside their class-mates' (widened by TOLERANCE of the mates' median)."""
    found = []
    for name, _ in OUTLIER_FIGURES:
        measured = [d for d in devices if name in d.get("intervals", {})]
        if len(measured) < MIN_CLASS:
            continue
        for device in measured:
            mates = [m for m in measured if m is not device]
            low = min(m["intervals"][name][0] for m in mates)
            high = max(m["intervals"][name][1] for m in mates)
            middle = float(np.median([m["figures"][name] for m in mates]))
            low, high = low - TOLERANCE * middle, high + TOLERANCE * middle
            own_low, own_high = device["intervals"][name]
            if own_low > high or own_high < low:
                found.append(
                    {
                        "target": device["target"],
                        "figure": name,
                        "value": device["figures"][name],
                        "interval": device["intervals"][name],
                        "class_spread": [round(low, 4), round(high, 4)],
                        "direction": "slower" if own_low > high else "faster",
                    }
                )
    return found


def rule() -> str:
    return (
        f"a device is an outlier when the {CONFIDENCE:.0%} interval of its end-to-end p99 (or p50) lies wholly outside the "
        f"range its class-mates' intervals cover, widened by {TOLERANCE:.0%} of their median; classes of {MIN_CLASS} devices or more"
    )


def fleet_sections(outcomes: list[dict]) -> dict:
    """For fleet.json, never raising: a summary that cannot be made says why instead."""
    try:
        return summarise(outcomes)
    except Exception as exc:  # noqa: BLE001 - the fleet's verdicts stand without the summary
        return {"summary_error": f"{type(exc).__name__}: {exc}"}


def load(folder: Path) -> dict:
    return json.loads((Path(folder) / "fleet.json").read_text())
