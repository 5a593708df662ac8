"""detections.jsonl: one line per frame (frame, t_capture_ns, detections with label, score, box, and keypoints where decoded)."""

from __future__ import annotations

import json
from pathlib import Path

from sdk.frame import Frame
from sdk.postprocess.detections import Detection, Detections
from sdk.sinks.files import partial_path, publish


def _record(d: Detection, r: int) -> dict:
    record = {"label": d.label, "score": round(d.score, 4), "box": [round(v, r) for v in d.box]}
    if d.keypoints:  # decoders with keypoints (postprocess.decoder.keypoints): [[x, y], ...] in source pixels
        record["keypoints"] = [[round(x, r), round(y, r)] for x, y in d.keypoints]
    return record


class JsonlSink:
    name = "jsonl"

    def __init__(self, path: Path, *, decimals: int = 2) -> None:
        self.path = Path(path)
        self.decimals = decimals
        self._partial = partial_path(self.path)
        self._handle = None

    def open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._handle = self._partial.open("w", encoding="utf-8", buffering=1 << 16)

    def write(self, frame: Frame, detections: Detections) -> None:
        r = self.decimals
        line = {
            "frame": frame.index,
            "t_capture_ns": frame.t_capture_ns,
            "detections": [_record(d, r) for d in detections],
        }
        self._handle.write(json.dumps(line, separators=(",", ":")) + "\n")

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None
            publish(self._partial, self.path)
