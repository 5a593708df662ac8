"""What `sdk optimize` leaves behind: NAME.optimized.onnx beside the model, PIPELINE.optimized.yaml beside the pipeline.

The optimized model is the prepared graph with the chosen changes, plus the constants the pipeline's decoding reads
from the model (SSD anchors), so the pipeline file preparing it finds everything where the original had it; its
metadata (`sdk.optimize`) records what changed. The pipeline file is the original's with `model.path` pointing at it,
`model.reference` naming the original (accuracy is always judged against the original's FP32 detections) and its
name ending in `-optimized`.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from sdk.artifacts import ModelArtifacts
from sdk.spec.loader import PipelineFile

SUFFIX = ".optimized"


def changes(report: dict, chosen) -> dict:
    """What a reviewer needs to see of how the deployed model differs from the original."""
    return {
        "candidate": chosen.name,
        "method": chosen.method,
        "channels": chosen.counts,
        "sparse_layers": chosen.sparse_layers,
        "reconstruction_error": {"max": max(chosen.errors.values(), default=0.0), "layers": chosen.errors},
        "accuracy": chosen.accuracy,
        "gate": report.get("gate"),
        "measured": chosen.measured,
        "predicted_ms": chosen.predicted_ms,
        "platform": report.get("platform"),
    }


def write_outputs(pipeline: PipelineFile, artifacts: ModelArtifacts, chosen, report: dict) -> dict:
    from onnx import numpy_helper

    from tools.optimize.graph import model_bytes

    model = type(chosen.model)()
    model.CopyFrom(chosen.model)
    from tools.models.prepare import tensors_to_extract

    present = {i.name for i in model.graph.initializer}
    tensors = artifacts.load_tensors()
    for name in tensors_to_extract(pipeline):  # the decoding's constants (SSD anchors), read again at preparation
        if name not in present:
            model.graph.initializer.append(numpy_helper.from_array(tensors[name], name))
    record = changes(report, chosen)
    entry = next((p for p in model.metadata_props if p.key == "sdk.optimize"), None) or model.metadata_props.add()
    entry.key, entry.value = "sdk.optimize", json.dumps(record, sort_keys=True)
    source = pipeline.model_path
    model_path = source.with_name(source.stem + SUFFIX + ".onnx")
    model_path.write_bytes(model_bytes(model))
    document = yaml.safe_load(pipeline.path.read_text())
    original = document["model"]["path"]
    document["name"] = f"{document.get('name', pipeline.spec.name)}-optimized"
    document["model"]["path"] = str(Path(original).with_name(model_path.name).as_posix())
    document["model"]["reference"] = document["model"].get("reference") or original
    pipeline_path = pipeline.path.with_name(pipeline.path.stem + SUFFIX + pipeline.path.suffix)
    header = (f"# Written by `sdk optimize` from {pipeline.path.name}: the model is {chosen.name} ({chosen.method}).\n"
              f"# Accuracy is judged against the original model (model.reference), never the optimized one.\n")  # fmt: skip
    pipeline_path.write_text(header + yaml.safe_dump(document, sort_keys=False, allow_unicode=True))
    return {"model": str(model_path), "pipeline": str(pipeline_path), "changes": record}
