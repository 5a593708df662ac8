"""One candidate of `sdk optimize`: how it was made, its model, what changed, its prediction, timing and gate."""

from __future__ import annotations

import json
from dataclasses import dataclass, field


@dataclass
class Candidate:
    name: str
    method: str  # magnitude, reconstruct, reconstruct+fskd, original; "+2:4" appended with sparsity
    saving: float  # the plan's wanted predicted saving
    model: object = None  # the ONNX proto
    counts: dict[str, list[int]] = field(default_factory=dict)  # layer -> [channels before, after]
    sparse_layers: list[str] = field(default_factory=list)
    errors: dict[str, float] = field(default_factory=dict)  # layer -> relative output error of its fit
    predicted_ms: float | None = None
    measured: dict | None = None
    accuracy: dict | None = None

    @property
    def passed(self) -> bool:
        return bool(self.accuracy) and not self.accuracy["failures"]


def metadata(candidate: Candidate) -> dict[str, str]:
    return {"sdk.optimize": json.dumps({"candidate": candidate.name, "method": candidate.method}, sort_keys=True)}


__all__ = ["Candidate", "metadata"]
