"""Model preparation on the host: cut the graph to its convolutional core, static shapes, folded constants.

The detectors users bring (TF Object Detection API, exported YOLOs) carry pre- and
postprocessing in the graph (Loops, NMS) that TensorRT and DLA cannot take. The pipeline
names the tensors to cut between; onnx-graphsurgeon does the cut and the constant folding;
what postprocessing needs from the original graph (SSD anchors) is read exactly from its
constants. The result is cached by content hash: a changed model or setting is a new key.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from sdk.artifacts import ModelArtifacts
from sdk.errors import ModelError
from sdk.release import sha256_of
from sdk.spec.cascade import CascadeSsdDecoder
from sdk.spec.loader import PipelineFile
from sdk.spec.schema import SsdDecoder
from tools.cache import build_folder

PREPARE_FORMAT = 1  # bump when the preparation's output changes for the same inputs


def tensors_to_extract(pipeline: PipelineFile) -> tuple[str, ...]:
    decoder = pipeline.spec.postprocess.decoder
    # Generated anchors ({generate: ...}) are made from the options where they are used: nothing to read here.
    return (decoder.anchors,) if isinstance(decoder, SsdDecoder) and isinstance(decoder.anchors, str) else ()


def cascade_tensors_to_extract(pipeline: PipelineFile) -> dict[str, tuple[Path, str]]:
    """The anchor tensors of cascade steps with an `ssd` decoder naming one: release key -> (the step's model, tensor)."""
    from sdk.cascade.ssd import cascade_tensor_key

    found = {}
    for i, step in enumerate(pipeline.spec.cascade):
        if isinstance(step.decoder, CascadeSsdDecoder) and isinstance(step.decoder.anchors, str):
            model = pipeline.resolve(step.model.path, f"cascade[{i}].model.path")
            found[cascade_tensor_key(step.name, step.decoder.anchors)] = (model, step.decoder.anchors)
    return found


class PrepareModel:
    """Lazy: the constructor records the settings; calling it returns cached or fresh artifacts."""

    def __init__(self, pipeline: PipelineFile, cache_root: Path) -> None:
        self.pipeline = pipeline
        self.cache_root = Path(cache_root)
        self._key: str | None = None

    @property
    def key(self) -> str:
        if self._key is None:
            spec = self.pipeline.spec.model.prepare
            settings = {
                "format": PREPARE_FORMAT,
                "model_sha256": sha256_of(self.pipeline.model_path),
                "prepare": spec.model_dump(mode="json") if spec else None,
                "extract": sorted(tensors_to_extract(self.pipeline)),
            }
            cascade = cascade_tensors_to_extract(self.pipeline)
            if cascade:  # only then: the keys of pipelines without one stay as they were
                settings["cascade_extract"] = {key: [name, sha256_of(model)] for key, (model, name) in cascade.items()}
            inputs = self.pipeline.spec.prepared_inputs()
            if spec is not None and inputs != {name: tuple(shape) for name, shape in spec.inputs.items()}:
                settings["batched_inputs"] = {name: list(shape) for name, shape in inputs.items()}  # several cameras, one call
            canonical = json.dumps(settings, sort_keys=True).encode()
            self._key = hashlib.sha256(canonical).hexdigest()[:24]
        return self._key

    @property
    def artifacts(self) -> ModelArtifacts:
        return ModelArtifacts(self.cache_root / "prepared" / self.key)

    @property
    def cached(self) -> bool:
        return all(path.is_file() for path in self.artifacts.files())

    def __call__(self) -> ModelArtifacts:
        target = self.artifacts
        if self.cached:
            return target
        build_folder(target.folder, lambda folder: self._prepare_into(ModelArtifacts(folder)))
        return target

    def _prepare_into(self, out: ModelArtifacts) -> None:
        import onnx

        source = self.pipeline.model_path
        try:
            model = onnx.load(str(source))
        except Exception as exc:  # protobuf decode errors have no common base
            raise ModelError(f"{source}: not a readable ONNX model: {exc}") from None
        tensors = {name: _constant_tensor(model, name, source) for name in tensors_to_extract(self.pipeline)}
        for key, (step_model, name) in cascade_tensors_to_extract(self.pipeline).items():
            try:
                graph = onnx.load(str(step_model))
            except Exception as exc:  # protobuf decode errors have no common base
                raise ModelError(f"{step_model}: not a readable ONNX model: {exc}") from None
            try:
                tensors[key] = _constant_tensor(graph, name, step_model)
            except ModelError as exc:
                step = key.split("/")[1]
                raise ModelError(
                    f"{exc.message} (cascade step {step!r}, decoder.anchors)",
                    hint="name an initializer or Constant output of the step's model, or generate the anchors: anchors: {generate: {...}}",
                ) from None
        prepare = self.pipeline.spec.model.prepare
        if prepare is not None:
            model = _cut(model, self.pipeline.spec.prepared_inputs(), prepare.outputs, prepare.fold_constants, source)
        onnx.save(model, str(out.model_path))
        np.savez(out.tensors_path, **tensors)
        meta = {
            "key": self.key,
            "source_model": source.name,
            "source_sha256": sha256_of(source),
            "prepared_sha256": sha256_of(out.model_path),
            "inputs": {i.name: _dims(i) for i in model.graph.input},
            "outputs": {o.name: _dims(o) for o in model.graph.output},
            "extracted": {name: list(t.shape) for name, t in tensors.items()},
            "nodes": len(model.graph.node),
        }
        out.meta_path.write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")


def _dims(value_info) -> list[int | str]:
    return [d.dim_value if d.HasField("dim_value") else d.dim_param for d in value_info.type.tensor_type.shape.dim]


def _constant_tensor(model, name: str, source: Path) -> np.ndarray:
    from onnx import numpy_helper

    for initializer in model.graph.initializer:
        if initializer.name == name:
            return numpy_helper.to_array(initializer)
    for node in model.graph.node:
        if node.op_type == "Constant" and name in node.output:
            for attribute in node.attribute:
                if attribute.name == "value":
                    return numpy_helper.to_array(attribute.t)
    raise ModelError(
        f"{source}: tensor {name!r} is not a constant of the graph",
        hint="name an initializer or Constant output (e.g. the SSD anchors) in postprocess.decoder",
    )


def _cut(model, inputs: dict[str, tuple[int, ...]], outputs: tuple[str, ...], fold: bool, source: Path):
    import onnx
    import onnx_graphsurgeon as gs

    graph = gs.import_onnx(model)
    tensors = graph.tensors()
    missing = [name for name in (*inputs, *outputs) if name not in tensors]
    if missing:
        raise ModelError(
            f"{source}: model.prepare names tensor(s) the graph does not have: {', '.join(missing)}",
            hint="list the graph's tensors with Netron or onnx; names include their ':0' suffix",
        )
    new_inputs = []
    for input_name, shape in inputs.items():  # the image, and any constant inputs of model.inputs
        new_input = tensors[input_name]
        new_input.inputs.clear()  # its producers (the graph's own preprocessing) are cut away
        new_input.shape = tuple(shape)
        if new_input.dtype is None:
            new_input.dtype = np.float32
        new_inputs.append(new_input)
    graph.inputs = new_inputs
    graph.outputs = [tensors[name] for name in outputs]
    for output in graph.outputs:
        output.dtype = output.dtype or np.float32
    graph.cleanup().toposort()
    dangling = sorted(
        {t.name for node in graph.nodes for t in node.inputs if isinstance(t, gs.Variable) and t.name and not t.inputs and t not in graph.inputs}
    )
    if dangling:
        raise ModelError(
            f"{source}: the outputs {list(outputs)} still depend on {', '.join(dangling)}, which the cut removes",
            hint="choose model.prepare.outputs computed from model.prepare.inputs alone (before the postprocessing)",
        )
    if fold:
        # Shape inference exposes the Shape->Reshape chains as constants; repeat until nothing folds.
        for _ in range(4):
            inferred = onnx.shape_inference.infer_shapes(gs.export_onnx(graph), data_prop=True)
            graph = gs.import_onnx(inferred)
            before = len(graph.nodes)
            graph.fold_constants().cleanup().toposort()
            if len(graph.nodes) == before:
                break
    for output in graph.outputs:
        output.shape = None  # let shape inference write the static shapes
    prepared = gs.export_onnx(graph)
    try:
        prepared = onnx.shape_inference.infer_shapes(prepared, strict_mode=True, data_prop=True)
        onnx.checker.check_model(prepared)
    except Exception as exc:  # onnx raises several unrelated types here
        raise ModelError(f"{source}: the cut graph is not a valid model: {exc}") from None
    return prepared
