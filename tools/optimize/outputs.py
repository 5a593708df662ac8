"""What `sdk optimize` leaves behind: NAME.optimized-HASH.onnx beside the model, PIPELINE.optimized.yaml beside the pipeline.

The optimized model is the prepared graph with the chosen changes, plus the constants the pipeline's decoding reads
from the model (SSD anchors), so the pipeline file preparing it finds everything where the original had it; its
metadata (`sdk.optimize`) records what changed. The pipeline file is the original's with `model.path` pointing at it,
`model.reference` naming the original, an accuracy budget at the gate's thresholds where it had none (so every later
deploy and validation judges the run against the original's FP32 detections), and its name ending in `-optimized`.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import yaml

from sdk.artifacts import ModelArtifacts
from sdk.sinks.files import write_whole
from sdk.spec.loader import PipelineFile
from tools.models.optimized import RECORD_KEY

SUFFIX = ".optimized"
OPTIMIZED_MODEL = re.compile(r".+\.optimized-[0-9a-f]{12}\.onnx$")  # what write_outputs names a model (never a user's file)
def changes(report: dict, chosen) -> dict:
    """What a reviewer needs to see of how the deployed model differs from the original. Only what the same inputs
    always give (the timings are the report's): the model that carries it stays bit-identical run to run."""
    return {
        "candidate": chosen.name,
        "method": chosen.method,
        "channels": chosen.counts,
        "sparse_layers": chosen.sparse_layers,
        "reconstruction_error": {"max": max(chosen.errors.values(), default=0.0), "layers": chosen.errors},
        "accuracy": chosen.accuracy,
        "gate": report.get("gate"),
        "predicted_ms": chosen.predicted_ms,
        "platform": report.get("platform"),
    }


def optimized_model_path(pipeline: PipelineFile, sha256: str) -> Path:
    """NAME.optimized-<the first 12 hex digits of its sha256>.onnx beside the model: each optimized model has a name of
    its own, so the pipeline file that names it is the one switch (a kill between the two writes leaves the pipeline
    naming the model it named before, which is still there)."""
    source = pipeline.model_path
    return source.with_name(f"{source.stem}{SUFFIX}-{sha256[:12]}.onnx")


def optimized_pipeline_path(pipeline: PipelineFile) -> Path:
    return pipeline.path.with_name(pipeline.path.stem + SUFFIX + pipeline.path.suffix)


def _named_model(pipeline_path: Path) -> Path | None:
    """The model an earlier optimized pipeline file names (model.path, relative to its folder), or None."""
    try:
        document = yaml.safe_load(pipeline_path.read_text())
        return (pipeline_path.parent / document["model"]["path"]).resolve()
    except (OSError, ValueError, TypeError, KeyError, yaml.YAMLError):
        return None


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
    entry = next((p for p in model.metadata_props if p.key == RECORD_KEY), None) or model.metadata_props.add()
    entry.key, entry.value = RECORD_KEY, json.dumps(record, sort_keys=True)
    data = model_bytes(model)
    model_path = optimized_model_path(pipeline, hashlib.sha256(data).hexdigest())
    pipeline_path = optimized_pipeline_path(pipeline)
    before = _named_model(pipeline_path)  # the model the previous optimized pipeline names, if any
    write_whole(model_path, data)  # a name of its own (its content's hash): the pipeline file still names the old one
    document = yaml.safe_load(pipeline.path.read_text())
    original = document["model"]["path"]
    document["name"] = f"{document.get('name', pipeline.spec.name)}-optimized"
    document["model"]["path"] = str(Path(original).with_name(model_path.name).as_posix())
    document["model"]["reference"] = document["model"].get("reference") or original
    budgets = document.get("budgets") or {}
    if not budgets.get("accuracy"):  # every later deploy and validation judges the optimized model against the original
        gate = report.get("gate") or {}
        budgets["accuracy"] = {k: gate[k] for k in ("min_recall", "min_precision", "max_mean_score_drift") if k in gate}
        document["budgets"] = budgets
    header = (f"# Written by `sdk optimize` from {pipeline.path.name}: the model is {chosen.name} ({chosen.method}).\n"
              f"# Accuracy is judged against the original model (model.reference), never the optimized one.\n")  # fmt: skip
    write_whole(pipeline_path, header + yaml.safe_dump(document, sort_keys=False, allow_unicode=True))  # the switch, in one rename
    if before is not None and before != model_path and OPTIMIZED_MODEL.match(before.name) and before.parent == model_path.parent:
        before.unlink(missing_ok=True)  # named by nothing now
    return {"model": str(model_path), "pipeline": str(pipeline_path), "changes": {**record, "measured": chosen.measured}}
