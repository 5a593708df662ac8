"""What `sdk optimize` recorded in a model it wrote (its `sdk.optimize` metadata): read by the release bundle (signed
with the manifest) and the engine plan (the 2:4 sparse layers); written by tools/optimize/outputs.py."""

from __future__ import annotations

import json
from pathlib import Path

RECORD_KEY = "sdk.optimize"  # the model's metadata entry that says what `sdk optimize` changed


def optimize_record(model_path: Path) -> dict | None:
    """What `sdk optimize` changed in this model (its `sdk.optimize` metadata), or None for a model it did not write (or
    one ONNX cannot read: preparing it says why)."""
    import onnx
    from google.protobuf.message import DecodeError

    try:
        model = onnx.load(str(model_path), load_external_data=False)
    except (OSError, DecodeError):
        return None
    entry = next((p for p in model.metadata_props if p.key == RECORD_KEY), None)
    return json.loads(entry.value) if entry is not None else None
