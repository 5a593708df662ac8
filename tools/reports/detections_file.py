"""Reading detections.jsonl back: per frame, the detections as (label, score, box) tuples."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from sdk.errors import SdkError


def read_detections(path: Path) -> dict[int, list[tuple[str, float, np.ndarray]]]:
    frames: dict[int, list] = {}
    try:
        lines = Path(path).read_text().splitlines()
    except FileNotFoundError:
        raise SdkError(f"{path}: no detections were written", hint="the run's pipeline needs a jsonl sink (deploy adds one)") from None
    for number, line in enumerate(lines, 1):
        try:
            record = json.loads(line)
            key = (record["camera"], int(record["frame"])) if "camera" in record else int(record["frame"])  # several cameras: per camera
            frames[key] = [(d["label"], float(d["score"]), np.asarray(d["box"], float)) for d in record["detections"]]
        except (ValueError, KeyError, TypeError) as exc:
            raise SdkError(f"{path}:{number}: not a detections line ({exc})", hint="the file was cut or edited; run the validation again") from None
    return frames
