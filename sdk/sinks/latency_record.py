"""A frame's latency record, as the live view sends it and the mcap sink writes it (`latency: true`): the stages of
the frame loop's marks (sdk/runtime/recorder.py) in ms, end to end, and the frame's deadline, whether it missed it
and its camera's misses so far; JSON, with the JSON Schema Foxglove and other readers decode it by."""

from __future__ import annotations

import json

from sdk.frame import Frame

STAGES = ("queue", "preprocess", "infer", "postprocess", "sink")  # the frame loop's marks, in order
SCHEMA_NAME = "sdk.FrameLatency"
_MS = {"type": "number"}
LATENCY_SCHEMA = {
    "type": "object",
    "title": SCHEMA_NAME,
    "properties": {
        "frame": {"type": "integer"},
        "camera": {"type": ["string", "null"]},
        "stages_ms": {"type": "object", "properties": dict.fromkeys(STAGES, _MS)},
        "end_to_end_ms": _MS,
        "deadline_ms": {"type": ["number", "null"]},
        "missed": {"type": "boolean"},
        "misses": {"type": "integer", "description": "this camera's frames past the deadline since the run began"},
    },
}


def schema_bytes() -> bytes:
    return json.dumps(LATENCY_SCHEMA).encode()


class MissCounter:
    """Each camera's frames past its deadline (None: one camera), counted for every frame, sent or not."""

    def __init__(self) -> None:
        self.deadlines: dict[str | None, float] = {}  # ms by camera; absent: no deadline
        self.misses: dict[str | None, int] = {}

    def count(self, camera: str | None, marks: list[int]) -> tuple[float, float | None, bool, int]:
        """(end to end ms, deadline ms, missed, the camera's misses so far) of a frame's marks."""
        deadline = self.deadlines.get(camera)
        end_to_end = (marks[-1] - marks[0]) / 1e6
        missed = deadline is not None and end_to_end > deadline
        misses = self.misses[camera] = self.misses.get(camera, 0) + missed
        return end_to_end, deadline, missed, misses


def record(frame: Frame, marks: list[int], end_to_end: float, deadline: float | None, missed: bool, misses: int) -> dict:
    stages = {"queue": (marks[1] - marks[0]) / 1e6}
    for i, stage in enumerate(STAGES[1:], start=2):
        stages[stage] = (marks[i] - marks[i - 1]) / 1e6
    message = {"frame": frame.index, "camera": frame.camera, "stages_ms": stages, "end_to_end_ms": end_to_end}
    message.update(deadline_ms=deadline, missed=missed, misses=misses)
    return message
