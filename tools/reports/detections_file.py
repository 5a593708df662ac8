"""Reading detections.jsonl back: per frame, the detections as (label, score, box) tuples."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from sdk.errors import SdkError


def detection_records(path: Path, read, *, last: bool = False) -> dict:
    """`read(record)` of each line of detections.jsonl, by what it returns as key (None: the line is skipped; the first
    line of a key is kept, or the last with `last`). A missing file or a line that is not a detections record: one SdkError naming it."""
    found: dict = {}
    try:
        lines = Path(path).read_text().splitlines()
    except FileNotFoundError:
        raise SdkError(f"{path}: no detections were written", hint="the run's pipeline needs a jsonl sink (deploy adds one)") from None
    for number, line in enumerate(lines, 1):
        try:
            key, value = read(json.loads(line))
        except (ValueError, KeyError, TypeError) as exc:
            raise SdkError(f"{path}:{number}: not a detections line ({exc})", hint="the file was cut or edited; run the validation again") from None
        if key is not None and (last or key not in found):
            found[key] = value
    return found


def read_detections(path: Path) -> dict[int, list[tuple[str, float, np.ndarray]]]:
    def read(record: dict):
        key = (record["camera"], int(record["frame"])) if "camera" in record else int(record["frame"])  # several cameras: per camera
        return key, [(d["label"], float(d["score"]), np.asarray(d["box"], float)) for d in record["detections"]]

    return detection_records(path, read, last=True)
